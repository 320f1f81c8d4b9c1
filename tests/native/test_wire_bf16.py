"""bfloat16 on the wire in the native core (xla_ffi/transport/wire_link.h): the wire
kernels of the AVX2 build against the generic build and NumPy, bit for bit; and the
all-reduce on float32 buffers with bfloat16 messages against jax_accl's bfloat16 sum of
the operands rounded once (the definition, docs/api.md), for every algorithm, over the
in-process transport (threads of one process: float32 messages of rounded values) and
over message channels through the WireLink the runtime puts between hosts (bfloat16
messages; the framing and progress engine of TCP, here over memory rings)."""

import ml_dtypes
import numpy as np
import pytest

from jax_accl import _accl, _accl_testing
from jax_accl.errors import AcclError
from jax_accl.testing.threads import allreduce_threads
from jax_accl.testing.wire_rows import rank_order_sum, rows, to_wire

COUNT = 1001  # eight lanes at a time and a tail of one


def special_floats(seed: int, count: int = COUNT) -> np.ndarray:
    """Random float32 bit patterns (NaNs, infinities, subnormals among them), with ties,
    subnormals, signed zeros, infinities and NaNs (quiet and signalling) at the start."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 2**32, count, dtype=np.uint64).astype(np.uint32)
    head = np.array(
        [
            0x3F808000,  # 1 + 2^-8: a tie, to the even 1
            0x3F818000,  # 1 + 3 * 2^-8: a tie, to the even 1 + 2^-6
            0x3F808001,  # just above a tie: up
            0xBF808000,  # a negative tie
            0x00008000,  # a subnormal tie
            0x00000001,  # the smallest subnormal
            0x807FFFFF,  # the largest negative subnormal
            0x7F7FFFFF,  # the largest float: rounds to infinity
            0x7F800000,
            0xFF800000,
            0x00000000,
            0x80000000,
            0x7FC00000,  # quiet NaN
            0x7F800001,  # signalling NaN, payload in the low bits only
            0xFFA00000,  # negative signalling NaN
        ],
        np.uint32,
    )
    x[: head.size] = head
    return x.view(np.float32)


def kernel(name: str, isa: str, srcs, out_dtype, count: int = COUNT) -> np.ndarray:
    out = np.full(count, 0x5A5A, np.uint16) if out_dtype == np.uint16 else np.zeros(count)
    out = out.astype(out_dtype)
    _accl_testing.wire_kernel(name, isa, out.ctypes.data, [s.ctypes.data for s in srcs], count)
    return out


def bits(x: np.ndarray) -> np.ndarray:
    return x.view(np.uint16 if x.dtype.itemsize == 2 else np.uint32)


def narrowed_model(x: np.ndarray) -> np.ndarray:
    """The model of narrowing, as bfloat16 bits: to nearest even (ml_dtypes); a NaN keeps
    its sign and high payload bits and is made quiet (its top 16 bits, quiet bit set)."""
    x = np.asarray(x, np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        out = bits(to_wire(x)).copy()
    nan = np.isnan(x)
    out[nan] = (bits(x)[nan] >> 16).astype(np.uint16) | 0x40
    return out


def rounded(x: np.ndarray) -> np.ndarray:
    """The model: float32 to bfloat16 and back."""
    return (narrowed_model(x).astype(np.uint32) << 16).view(np.float32)


def assert_same_bits(got: np.ndarray, want: np.ndarray, what: str):
    """Bit for bit, but for NaNs, which must be NaNs alike (a sum of two NaNs may keep
    either's payload: ml_dtypes and the CPU choose differently)."""
    nan = np.isnan(want.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(got.astype(np.float32)), nan, what)
    np.testing.assert_array_equal(bits(got)[~nan], bits(want)[~nan], what)


ISAS = ["generic"] + (["avx2"] if _accl.reduce_isa() == "avx2" else [])


def test_this_machine_runs_the_avx2_kernels():
    """The x86-64 CI machines have AVX2: the comparisons below cover both builds there."""
    import platform

    if platform.machine() in ("x86_64", "AMD64"):
        assert ISAS == ["generic", "avx2"]


@pytest.mark.parametrize("isa", ISAS)
def test_narrow_widen_and_round_against_the_model(isa):
    a = special_floats(1)
    narrowed = kernel("narrow", isa, [a], np.uint16)
    np.testing.assert_array_equal(narrowed, narrowed_model(a))
    assert narrowed[:4].tolist() == [0x3F80, 0x3F82, 0x3F81, 0xBF80]
    assert narrowed[7] == 0x7F80 and narrowed[13] == 0x7FC0 and narrowed[14] == 0xFFE0
    widened = kernel("widen", isa, [narrowed], np.float32)
    np.testing.assert_array_equal(bits(widened), narrowed.astype(np.uint32) << 16)
    np.testing.assert_array_equal(bits(kernel("round", isa, [a], np.float32)), bits(widened))
    # Rounding a rounded value leaves it as it is (the kernels round every input).
    np.testing.assert_array_equal(bits(kernel("round", isa, [widened], np.float32)), bits(widened))


@pytest.mark.parametrize("isa", ISAS)
def test_sums_against_the_model(isa):
    a, b, c = special_floats(2), special_floats(3), special_floats(4)
    with np.errstate(invalid="ignore", over="ignore"):
        two = rounded(rounded(a) + rounded(b))
        three = rounded(two + rounded(c))
        message = narrowed_model(b).view(ml_dtypes.bfloat16)
    assert_same_bits(kernel("sum", isa, [a, b], np.float32), two, "sum")
    assert_same_bits(kernel("sum_many", isa, [a, b, c], np.float32), three, "sum_many")
    assert_same_bits(
        kernel("sum_message", isa, [a, bits(message)], np.uint32).view(np.float32), two, "message"
    )
    got = kernel("widen_message", isa, [a, bits(message)], np.float32)
    np.testing.assert_array_equal(bits(got), bits(message.astype(np.float32)))


@pytest.mark.skipif(len(ISAS) < 2, reason="no AVX2 kernels on this CPU")
@pytest.mark.parametrize(
    "name,inputs",
    [
        ("narrow", 1),
        ("widen", 1),
        ("round", 1),
        ("sum", 2),
        ("sum_many", 3),
        ("sum_many", 5),
        ("sum_message", 2),
        ("widen_message", 2),
    ],
)
def test_avx2_kernels_equal_the_generic_ones_bit_for_bit(name, inputs):
    """Every bit, NaN payloads included, on random bit patterns with specials; but where
    two NaNs meet in a sum, which one's payload the sum keeps is the compiler's choice
    (it may swap an addition's operands) in either build: there, a NaN alike."""
    srcs = [special_floats(10 + i) for i in range(inputs)]
    if name == "widen":
        srcs = [narrowed_model(srcs[0])]
    if name.endswith("_message"):
        srcs[1] = narrowed_model(srcs[1])
    out = np.uint16 if name == "narrow" else np.uint32
    generic = kernel(name, "generic", srcs, out)
    avx2 = kernel(name, "avx2", srcs, out)
    as_float = [s.view(ml_dtypes.bfloat16) if s.dtype == np.uint16 else s for s in srcs]
    two_nans = sum(np.isnan(s.astype(np.float32)) for s in as_float) >= 2
    if "sum" in name:
        assert np.isnan(avx2[two_nans].view(np.float32)).all()
        assert np.isnan(generic[two_nans].view(np.float32)).all()
    else:
        two_nans[:] = False
    assert (~two_nans).sum() > COUNT - 10
    np.testing.assert_array_equal(avx2[~two_nans], generic[~two_nans], name)
    # Tails: every length from 0 to 17 ends the same way.
    for count in range(18):
        np.testing.assert_array_equal(
            kernel(name, "avx2", srcs, out, count), kernel(name, "generic", srcs, out, count)
        )


def bf16_sum_of_rounded(table, algorithm, run):
    """The definition: jax_accl's bfloat16 sum of the operands rounded once, widened."""
    return [o.astype(np.float32) for o in run([to_wire(r) for r in table], algorithm)]


def threads(inputs, algorithm, wire=False):
    return allreduce_threads(list(inputs), "sum", algorithm, wire_bf16=wire)


def channels(inputs, algorithm, wire=False, stripes=1):
    inputs = [np.ascontiguousarray(x) for x in inputs]
    outs = [np.empty_like(x) for x in inputs]
    errors = _accl_testing.allreduce_threads_channels(
        [x.ctypes.data for x in inputs],
        [y.ctypes.data for y in outs],
        [x.size for x in inputs],
        inputs[0].dtype.name,
        "sum",
        algorithm,
        stripes,
        60.0,
        wire,
    )
    assert errors == [""] * len(inputs), errors
    return outs


def check_one_result(outs, want, what):
    for r, out in enumerate(outs):
        assert out.dtype == np.float32
        np.testing.assert_array_equal(bits(out), bits(outs[0]), f"{what}: rank {r}")
        np.testing.assert_array_equal(bits(out), bits(want[r]), f"{what}: rank {r}")


@pytest.mark.parametrize("algorithm", ["direct", "ring", "halving_doubling", "reduce_broadcast"])
@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("count", [COUNT, (1 << 19) + 5])
def test_threads_of_one_process(algorithm, n, count):
    """The in-process transport (peer memory and messages): every rank the same bits, those
    of the bfloat16 sum of the rounded operands; rank order where the algorithm folds so."""
    table = rows(n, count)
    got = threads(table, algorithm, wire=True)
    check_one_result(got, bf16_sum_of_rounded(table, algorithm, threads), algorithm)
    if algorithm in ("direct", "reduce_broadcast"):
        np.testing.assert_array_equal(bits(got[0]), bits(rank_order_sum(table)))
    assert not np.array_equal(got[0], table.sum(0))  # it did round


@pytest.mark.parametrize("algorithm", ["direct", "ring", "halving_doubling"])
@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("count,stripes", [(COUNT, 1), ((1 << 20) + 3, 1), ((1 << 20) + 3, 2)])
def test_message_channels(algorithm, n, count, stripes):
    """Through a WireLink: every message bfloat16 (narrowed as it is sent, widened or
    reduced as it arrives), the streamed schedules at 4 MiB (the pair exchange of two
    ranks, the ring's pieces), two stripes per peer; the same bits as the bfloat16 sum."""
    table = rows(n, count)
    got = channels(table, algorithm, wire=True, stripes=stripes)
    want = [
        o.astype(np.float32)
        for o in channels([to_wire(r) for r in table], algorithm, stripes=stripes)
    ]
    check_one_result(got, want, f"{algorithm} over {stripes} stripes")


def test_a_group_of_one_rounds_its_operand():
    x = special_floats(5)
    (got,) = threads([x], "auto", wire=True)
    np.testing.assert_array_equal(bits(got), bits(rounded(x)))


def test_specials_travel_as_the_definition_says():
    """NaN, infinities, subnormals and ties through a real all-reduce of three ranks."""
    table = np.stack([special_floats(20 + r) for r in range(3)])
    with np.errstate(invalid="ignore", over="ignore"):
        want = rank_order_sum(table)
    for algorithm, run in (("direct", threads), ("reduce_broadcast", threads)):
        for out in run(table, algorithm, wire=True):
            assert_same_bits(out, want, algorithm)
    for out in channels(table, "direct", wire=True):
        assert_same_bits(out, want, "direct over channels")


def test_only_float32_sums_travel_as_bfloat16():
    ints = [np.arange(8, dtype=np.int32)] * 2
    with pytest.raises(AcclError, match="bfloat16 on the wire carries float32 sum all-reduces"):
        threads(ints, "direct", wire=True)
    with pytest.raises(AcclError, match="float32 sum all-reduces.*max"):
        allreduce_threads([np.ones(8, np.float32)] * 2, "max", "direct", wire_bf16=True)
