"""Native tier: the algorithms through the binding, one thread per rank, against NumPy."""

import functools

import ml_dtypes
import numpy as np
import pytest

from jax_accl import _accl
from jax_accl.testing.threads import allreduce_threads

ALGORITHMS = ["direct", "ring", "halving_doubling", "reduce_broadcast", "auto"]
NUMPY_OPS = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum}


def expected(inputs, op):
    with np.errstate(over="ignore", invalid="ignore"):
        return functools.reduce(NUMPY_OPS[op], inputs)


def rank_values(n, count, dtype, seed=0):
    rng = np.random.default_rng(seed + 131 * n + count)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return [rng.random(count) < 0.5 for _ in range(n)]
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return [
            rng.integers(info.min, info.max, count, dtype=dtype, endpoint=True) for _ in range(n)
        ]
    if np.issubdtype(dtype, np.complexfloating):
        return [
            (rng.standard_normal(count) + 1j * rng.standard_normal(count)).astype(dtype)
            for _ in range(n)
        ]
    return [rng.standard_normal(count).astype(dtype) for _ in range(n)]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("count", [0, 1, 7, 1000, 2**20 + 3])
def test_sum_float32_every_shape(algorithm, n, count):
    inputs = rank_values(n, count, np.float32)
    outputs = allreduce_threads(inputs, "sum", algorithm)
    want = np.sum(np.stack(inputs).astype(np.float64), axis=0)
    for rank, out in enumerate(outputs):
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * n, err_msg=f"rank {rank}")
        # Every rank ends with bit-identical results, whatever the algorithm.
        np.testing.assert_array_equal(out, outputs[0])


@pytest.mark.parametrize("algorithm", ["direct", "reduce_broadcast"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("count", [5, 1000, 2**18 + 7])
def test_one_pass_fold_rounds_like_the_pairwise_fold(algorithm, dtype, count):
    """The k-input sum kernel adds in rank order, rounding after every addition exactly
    as ((x0 + x1) + x2) + ... does in NumPy: bitwise equal, including the tail."""
    inputs = rank_values(8, count, dtype, seed=5)
    for out in allreduce_threads(inputs, "sum", algorithm):
        np.testing.assert_array_equal(out, expected(inputs, "sum"))


INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


@pytest.mark.parametrize("algorithm", ["direct", "ring", "halving_doubling", "reduce_broadcast"])
@pytest.mark.parametrize("dtype", INT_DTYPES + ["bool"])
@pytest.mark.parametrize("op", ["sum", "prod", "min", "max"])
def test_integers_bitwise(algorithm, dtype, op):
    n = 5
    inputs = rank_values(n, 1001, dtype)
    outputs = allreduce_threads(inputs, op, algorithm)
    if dtype == "bool":
        want = (
            np.logical_or.reduce(inputs) if op in ("sum", "max") else np.logical_and.reduce(inputs)
        )
    else:
        want = expected(inputs, op)
    for out in outputs:
        np.testing.assert_array_equal(out, want)


FLOAT_CASES = [
    (dtype, rtol, op)
    for dtype, rtol in [
        ("float16", 2e-2),
        (ml_dtypes.bfloat16, 5e-2),
        ("float32", 1e-5),
        ("float64", 1e-12),
        ("complex64", 1e-5),
        ("complex128", 1e-12),
    ]
    for op in ["sum", "prod", "min", "max"]
    # min/max of complex numbers is not defined: tested as an error below
    if not (op in ("min", "max") and np.dtype(dtype).kind == "c")
]


@pytest.mark.parametrize("algorithm", ["direct", "ring", "halving_doubling", "reduce_broadcast"])
@pytest.mark.parametrize("dtype,rtol,op", FLOAT_CASES)
def test_floats(algorithm, dtype, rtol, op):
    n = 3
    inputs = rank_values(n, 999, dtype)
    outputs = allreduce_threads(inputs, op, algorithm)
    want = expected(
        [x.astype(np.complex128 if np.dtype(dtype).kind == "c" else np.float64) for x in inputs], op
    )
    for out in outputs:
        np.testing.assert_allclose(out.astype(want.dtype), want, rtol=rtol, atol=rtol)
        np.testing.assert_array_equal(out.view(np.uint8), outputs[0].view(np.uint8))


def test_max_propagates_nan():
    a = np.array([1.0, np.nan, 3.0], np.float32)
    b = np.array([np.nan, 2.0, 1.0], np.float32)
    for out in allreduce_threads([a, b], "max", "direct"):
        np.testing.assert_array_equal(out, np.array([np.nan, np.nan, 3.0], np.float32))


def test_complex_max_is_an_error():
    x = np.ones(4, np.complex64)
    with pytest.raises(RuntimeError, match="max is not defined for complex64"):
        allreduce_threads([x, x], "max", "ring")


def test_cost_model_picks_direct_small_and_bandwidth_algorithms_large():
    assert _accl.choose_algorithm(8, 4096) == "direct"
    assert _accl.choose_algorithm(8, 64 << 20) == "reduce_broadcast"
    # Without peer memory (message transports) the bandwidth-optimal ones take over.
    assert _accl.choose_algorithm(8, 64 << 20, peer_memory=False) in ("ring", "halving_doubling")
    assert _accl.predict_seconds("reduce_broadcast", 8, 1 << 20, peer_memory=False) == float("inf")
    for alg in ("direct", "ring", "halving_doubling", "reduce_broadcast"):
        assert _accl.predict_seconds(alg, 8, 1 << 20) > 0
    assert _accl.predict_seconds("ring", 1, 1 << 20) == 0


@pytest.mark.parametrize("processes,k", [(2, 4), (4, 2), (8, 1)])
def test_one_host_choice_is_flat_small_and_cross_memory_attach_large(processes, k):
    # Small messages: a flat algorithm over all devices (a few message steps), never the
    # hierarchy's sync points; large ones: the cross-memory-attach reduce-broadcast.
    for cma in (True, False):
        assert _accl.choose_one_host(processes, k, 4096, cma) in (
            "direct",
            "ring",
            "halving_doubling",
        )
    assert _accl.choose_one_host(processes, k, 16 << 20, True) == "reduce_broadcast"
    # Without cross-memory attach, large messages: the hierarchy where processes hold
    # many devices (its local passes are plain copies), else a flat algorithm.
    expected = {
        4: ["hierarchical"],
        2: ["ring", "halving_doubling", "hierarchical"],
        1: ["ring", "halving_doubling"],
    }[k]
    assert _accl.choose_one_host(processes, k, 16 << 20, False) in expected


@pytest.mark.parametrize("algorithm", ["direct", "ring", "halving_doubling", "reduce_broadcast"])
def test_bfloat16_sum_of_two_rounds_once_to_nearest_even(algorithm):
    """The bfloat16 sum kernel (eight lanes at a time where the CPU has AVX2, the scalar
    loop for the tail) against ml_dtypes: each element's float32 sum of the two operands
    rounded once to nearest even; random bit patterns (subnormals, infinities, NaNs
    among them) and exact ties, 1001 elements (a tail of 1)."""
    rng = np.random.default_rng(7)
    a, b = (rng.integers(0, 2**16, 1001, dtype=np.uint16).view(ml_dtypes.bfloat16) for _ in "ab")
    # Ties: 1 + 2^-8 (to 1, even) and 1 + 3 * 2^-8 (to 1 + 2^-6, even) as 1 plus a small
    # addend that bfloat16 holds exactly.
    a[:4] = np.array([1, 1, -1, 1], np.float32).astype(ml_dtypes.bfloat16)
    b[:4] = np.array([2**-8, 3 * 2**-8, -(2**-8), 2**-8 + 2**-15], np.float32).astype(
        ml_dtypes.bfloat16
    )
    with np.errstate(invalid="ignore"):  # inf + -inf
        want = (a.astype(np.float32) + b.astype(np.float32)).astype(ml_dtypes.bfloat16)
    for out in allreduce_threads([a, b], "sum", algorithm):
        nan = np.isnan(want.astype(np.float32))
        np.testing.assert_array_equal(np.isnan(out.astype(np.float32)), nan)
        np.testing.assert_array_equal(out.view(np.uint16)[~nan], want.view(np.uint16)[~nan])
    assert want[:4].astype(np.float32).tolist() == [1, 1 + 2**-6, -1, 1 + 2**-7]
