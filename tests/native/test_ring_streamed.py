"""Native tier: the streamed ring (algorithms/ring_streamed.cc), what the ring runs over
more than two ranks on a link that queues sends with blocks of two pieces or more: over
byte-stream channels (the framing of the cross-process transports, on memory rings) and
between simulated hosts of the hierarchy, at 5, 8 and 16 ranks, integers bitwise."""

import numpy as np
import pytest

from jax_accl import _accl, _accl_testing
from jax_accl.plan import places_of

PIECE = 64 << 10  # bytes: a block of two pieces or more streams


def int_inputs(n, count, dtype=np.int32, seed=0):
    rng = np.random.default_rng(seed + 31 * n + count)
    info = np.iinfo(dtype)
    return [rng.integers(info.min, info.max, count, dtype=dtype, endpoint=True) for _ in range(n)]


def reduce(inputs, op):
    fn = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum}[op]
    with np.errstate(over="ignore"):
        out = inputs[0].copy()
        for x in inputs[1:]:
            out = fn(out, x)
        return out


def channels(inputs, op="sum", stripes=1, in_place=False, algorithm="ring"):
    outputs = inputs if in_place else [np.empty_like(x) for x in inputs]
    errors = _accl_testing.allreduce_threads_channels(
        [x.ctypes.data for x in inputs],
        [o.ctypes.data for o in outputs],
        [x.size for x in inputs],
        inputs[0].dtype.name,
        op,
        algorithm,
        stripes,
        60.0,
    )
    return outputs, errors


def streamed_rings():
    """Segments this process ran as the streamed ring (jax_accl.stats())."""
    return _accl.stats()["streamed_segments"]["ring"]


def test_blocks_of_one_piece_run_the_plain_ring():
    n = 5
    inputs = int_inputs(n, n * PIECE // 4 // 2)  # half a piece per block
    before = streamed_rings()
    outputs, errors = channels(inputs)
    assert errors == [""] * n and streamed_rings() == before
    for out in outputs:
        np.testing.assert_array_equal(out, reduce(inputs, "sum"))


def streamed_count(n, pieces, itemsize=4, extra=0):
    """Elements per rank for blocks of `pieces` pieces (and `extra` more: uneven blocks)."""
    return n * pieces * PIECE // itemsize + extra


@pytest.mark.parametrize("n", [5, 8, 16])
@pytest.mark.parametrize("pieces", [2, 3, 16, 40])  # 40: capped at 16, longer pieces
@pytest.mark.parametrize("extra", [0, 7])
@pytest.mark.parametrize("stripes", [1, 2])
def test_streamed_ring_matches_numpy_bitwise(n, pieces, extra, stripes):
    count = streamed_count(n, pieces, extra=extra)
    inputs = int_inputs(n, count, seed=pieces + stripes)
    before = streamed_rings()
    outputs, errors = channels(inputs, stripes=stripes)
    assert errors == [""] * n
    assert streamed_rings() - before == n  # every rank's one segment, streamed
    want = reduce(inputs, "sum")
    for rank, out in enumerate(outputs):
        np.testing.assert_array_equal(out, want, err_msg=f"rank {rank}")


@pytest.mark.parametrize("n", [5, 8, 16])
@pytest.mark.parametrize("pieces", [2, 5])
def test_streamed_ring_in_place(n, pieces):
    """out == in (XLA's aliased operand): a piece is overwritten only after every send
    that reads it has left."""
    inputs = int_inputs(n, streamed_count(n, pieces, extra=3))
    want = reduce(inputs, "sum")
    outputs, errors = channels([x.copy() for x in inputs], in_place=True, stripes=2)
    assert errors == [""] * n
    for out in outputs:
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("op", ["sum", "prod", "min", "max"])
@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int64])
def test_streamed_ring_every_op_and_width(op, dtype):
    n = 5
    inputs = int_inputs(n, streamed_count(n, 3, np.dtype(dtype).itemsize, extra=1), dtype)
    outputs, errors = channels(inputs, op=op)
    assert errors == [""] * n
    for out in outputs:
        np.testing.assert_array_equal(out, reduce(inputs, op))


def test_streamed_ring_float32_every_rank_bit_identical():
    n = 8
    rng = np.random.default_rng(8)
    inputs = [
        rng.standard_normal(streamed_count(n, 4, extra=5)).astype(np.float32) for _ in range(n)
    ]
    outputs, errors = channels(inputs)
    assert errors == [""] * n
    np.testing.assert_allclose(
        outputs[0], np.sum(np.stack(inputs).astype(np.float64), axis=0), rtol=1e-5, atol=1e-4
    )
    for out in outputs[1:]:
        np.testing.assert_array_equal(out, outputs[0])


def hierarchy(layout, inputs, between, chunks):
    outputs = [np.empty_like(x) for x in inputs]
    errors = _accl_testing.hierarchical_threads(
        places_of(layout),
        [x.ctypes.data for x in inputs],
        [o.ctypes.data for o in outputs],
        [x.size for x in inputs],
        [],
        inputs[0].dtype.name,
        "sum",
        between,
        chunks,
        60.0,
    )
    return outputs, errors


@pytest.mark.parametrize("hosts", [5, 8, 16])
@pytest.mark.parametrize("devices", [1, 2])
@pytest.mark.parametrize("between", ["ring", "halving_doubling"])
@pytest.mark.parametrize("chunks", [1, 3])
def test_between_hosts_at_5_8_16_hosts_bitwise(hosts, devices, between, chunks):
    """The hierarchy with the ring (streamed: slices of blocks of several pieces) or
    halving-doubling between 5, 8 and 16 simulated hosts of one process each."""
    layout = [[devices]] * hosts
    n = hosts * devices
    count = streamed_count(hosts, 4, extra=11) * devices * chunks
    inputs = int_inputs(n, count, seed=chunks)
    outputs, errors = hierarchy(layout, inputs, between, chunks)
    assert errors == [""] * n
    want = reduce(inputs, "sum")
    for rank, out in enumerate(outputs):
        np.testing.assert_array_equal(out, want, err_msg=f"rank {rank}")


@pytest.mark.parametrize("between", ["ring", "halving_doubling"])
def test_steps_timed_between_hosts_leave_the_results_bitwise(between):
    """With the steps between hosts timed (bench --steps: each step's receive and wait
    recorded through a forwarding link, algorithms/step_times.h), the hierarchy between
    5 simulated hosts gives the same bits as without."""
    layout = [[2]] * 5
    inputs = int_inputs(10, streamed_count(5, 4, extra=11) * 2 * 3, seed=5)
    _accl.set_step_times(True)
    try:
        outputs, errors = hierarchy(layout, inputs, between, 3)
    finally:
        _accl.set_step_times(False)
    assert errors == [""] * 10
    want = reduce(inputs, "sum")
    for rank, out in enumerate(outputs):
        np.testing.assert_array_equal(out, want, err_msg=f"rank {rank}")
