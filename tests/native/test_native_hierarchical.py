"""Native tier: the hierarchical all-reduce (algorithms/hierarchical.cc) with a thread per
rank on simulated hosts. A layout lists, per host, the devices of each of its processes:
[[2], [2]] is 2 hosts x 1 process x 2 devices, [[1, 1], [1, 1]] is 2 x 2 x 1. The host
tier reads peer memory where a host is one process, and sends messages otherwise; the
tier between hosts sends messages. Results against NumPy, integers bitwise."""

import functools

import numpy as np
import pytest

from jax_accl import _accl, _accl_testing
from jax_accl.plan import places_of

LAYOUTS = {
    "2x1x2": [[2], [2]],
    "2x2x1": [[1, 1], [1, 1]],
    "3x2x1": [[1, 1], [1, 1], [1, 1]],
    "2x2x2": [[2, 2], [2, 2]],
    "3x1x2": [[2], [2], [2]],
    "uneven 2+1": [[1, 1], [1]],
    "uneven 3+2+1": [[2, 1], [2], [1]],
    "uneven devices": [[3], [1, 1]],
    "2x4x1": [[1, 1, 1, 1], [1, 1, 1, 1]],
    "one host 2x3": [[3, 3]],
    "one host uneven": [[1, 2, 1]],
}
NUMPY_OPS = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum}


def run(
    layout,
    inputs,
    op="sum",
    between="auto",
    segments=(),
    counts=None,
    in_place=False,
    timeout_s=30.0,
    chunks=1,
):
    outputs = inputs if in_place else [np.empty_like(x) for x in inputs]
    errors = _accl_testing.hierarchical_threads(
        places_of(layout),
        [x.ctypes.data for x in inputs],
        [o.ctypes.data for o in outputs],
        counts or [x.size for x in inputs],
        list(segments),
        inputs[0].dtype.name,
        op,
        between,
        chunks,
        timeout_s,
    )
    return outputs, errors


def int_inputs(n, count, dtype=np.int32, seed=0):
    rng = np.random.default_rng(seed + 17 * n + count)
    info = np.iinfo(dtype)
    return [rng.integers(info.min, info.max, count, dtype=dtype, endpoint=True) for _ in range(n)]


def want(inputs, op):
    with np.errstate(over="ignore"):
        return functools.reduce(NUMPY_OPS[op], inputs)


@pytest.mark.parametrize("name", list(LAYOUTS))
@pytest.mark.parametrize("count", [0, 1, 7, 1000, 2**20 + 3])
def test_every_layout_matches_numpy_bitwise(name, count):
    n = len(places_of(LAYOUTS[name]))
    inputs = int_inputs(n, count)
    outputs, errors = run(LAYOUTS[name], inputs)
    assert errors == [""] * n
    for rank, out in enumerate(outputs):
        np.testing.assert_array_equal(out, want(inputs, "sum"), err_msg=f"rank {rank}")


@pytest.mark.parametrize("name", ["2x1x2", "2x2x1", "uneven 3+2+1"])
@pytest.mark.parametrize("between", ["direct", "ring", "halving_doubling"])
@pytest.mark.parametrize("op", ["sum", "prod", "min", "max"])
@pytest.mark.parametrize("dtype", ["int8", "uint16", "int64"])
def test_ops_and_algorithms_between_hosts(name, between, op, dtype):
    n = len(places_of(LAYOUTS[name]))
    inputs = int_inputs(n, 999, np.dtype(dtype))
    outputs, errors = run(LAYOUTS[name], inputs, op=op, between=between)
    assert errors == [""] * n
    for out in outputs:
        np.testing.assert_array_equal(out, want(inputs, op))


@pytest.mark.parametrize("name", ["2x1x2", "2x2x2", "uneven 2+1", "uneven devices"])
def test_in_place_and_fused_segments(name):
    """In place (out is in) and a call of several segments, as XLA hands fused leaves."""
    n = len(places_of(LAYOUTS[name]))
    inputs = int_inputs(n, 100_003)
    expected = want(inputs, "sum")
    outputs, errors = run(
        LAYOUTS[name], [x.copy() for x in inputs], segments=[3, 0, 50_000, 1], in_place=True
    )
    assert errors == [""] * n
    for out in outputs:
        np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("name", ["3x1x2", "2x2x1"])
def test_float32_every_rank_bit_identical(name):
    n = len(places_of(LAYOUTS[name]))
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal(2**18 + 5).astype(np.float32) for _ in range(n)]
    outputs, errors = run(LAYOUTS[name], inputs)
    assert errors == [""] * n
    np.testing.assert_allclose(
        outputs[0], np.sum(np.stack(inputs).astype(np.float64), axis=0), rtol=1e-5, atol=1e-5 * n
    )
    for out in outputs[1:]:
        np.testing.assert_array_equal(out, outputs[0])


@pytest.mark.parametrize("name", ["2x1x2", "2x2x1"])
def test_a_rank_with_another_count_fails_every_rank_without_hanging(name):
    n = len(places_of(LAYOUTS[name]))
    inputs = int_inputs(n, 4096)
    counts = [4096] * n
    counts[-1] = 4000
    _, errors = run(LAYOUTS[name], inputs, counts=counts, timeout_s=5.0)
    assert all(errors), errors
    assert any("disagree" in e or "different call" in e for e in errors), errors
    assert not any("timed out" in e for e in errors), errors


@pytest.mark.parametrize("name", ["2x1x2", "2x2x1", "2x2x2", "uneven 3+2+1", "one host 2x3"])
@pytest.mark.parametrize("chunks", [2, 3, 16])
@pytest.mark.parametrize("count", [5, 1000, 2**20 + 3])
def test_pipelined_chunks_match_numpy_bitwise(name, chunks, count):
    """Cut into chunks, the step between hosts on a thread of its own: the same result,
    also in place, with fused segments, and with more chunks than some segments have
    elements (empty chunks)."""
    n = len(places_of(LAYOUTS[name]))
    inputs = int_inputs(n, count, seed=chunks)
    expected = want(inputs, "sum")
    outputs, errors = run(
        LAYOUTS[name],
        [x.copy() for x in inputs],
        chunks=chunks,
        segments=[count // 3, 1],
        in_place=True,
    )
    assert errors == [""] * n
    for out in outputs:
        np.testing.assert_array_equal(out, expected)


def test_two_hosts_reduce_large_slices_by_halves_small_ones_directly():
    """Between two hosts every schedule sends a slice once each way; direct reduces all
    of it, halving-doubling (the ring, for two) half and receives the rest into the
    output: the runtime runs it for large slices, direct for small ones and where it
    streams beside a processes tier (slices up to 4 MiB)."""

    def between(layout, nbytes):
        return _accl.plan(places_of(layout), nbytes, rails=2, chunks=0)["between"]

    assert between([[1], [1]], 64 << 20) in ("ring", "halving_doubling")
    assert between([[1], [1]], 64 << 10) == "direct"
    assert between([[1, 1], [1, 1]], 64 << 20) in ("ring", "halving_doubling")
    assert between([[1, 1], [1, 1]], 4 << 20) == "direct"


def test_pipelined_mismatch_fails_every_rank_without_hanging():
    n = len(places_of(LAYOUTS["2x2x2"]))
    inputs = int_inputs(n, 1 << 16)
    counts = [1 << 16] * n
    counts[5] = 1000
    _, errors = run(LAYOUTS["2x2x2"], inputs, counts=counts, chunks=4, timeout_s=5.0)
    assert all(errors), errors
    assert not any("timed out" in e for e in errors), errors


def test_cost_model_pipelines_large_calls_between_hosts_only():
    assert _accl.pipeline_chunks(2, 1, 2, 2, 4 << 10) == 1  # small: one chunk
    assert _accl.pipeline_chunks(1, 2, 4, 2, 64 << 20) == 1  # one host: nothing to overlap
    # Two hosts of several processes, slices up to 4 MiB: direct between them, streamed,
    # sqrt(the slice's wire time / 250 us) chunks, at most 16 (the model's wire: 10
    # Gbit/s, or what JAX_ACCL_LINK_GBITS states); larger slices (halving-doubling
    # between them) and hosts of one process each: the cost model's count.
    assert _accl.pipeline_chunks(2, 2, 1, 1, 1 << 20) == 1
    assert _accl.pipeline_chunks(2, 2, 1, 1, 4 << 20) == 3
    saved = _accl.get_cost_model()
    try:
        _accl.set_cost_model(net_beta=8 / 0.285e9)  # 300 Mbit/s rails' payload
        assert _accl.pipeline_chunks(2, 2, 2, 2, 4 << 20) == 12  # 15, but no chunk under 80 KiB
        assert _accl.pipeline_chunks(2, 2, 1, 2, 8 << 20) == 16
    finally:
        _accl.set_cost_model(**saved)
    assert 2 <= _accl.pipeline_chunks(2, 2, 1, 2, 64 << 20) <= 16
    assert 1 <= _accl.pipeline_chunks(2, 1, 2, 2, 4 << 20) <= 8
    # More hosts: the cost model's count, no chunk under 256 KiB.
    assert 2 <= _accl.pipeline_chunks(3, 2, 1, 2, 64 << 20) <= 16
    assert _accl.pipeline_chunks(3, 2, 1, 2, 1 << 20) <= 4


def test_group_layout_tiers():
    layout = _accl.group_layout(places_of([[2, 1], [2], [1]]))
    assert layout["hosts"] == [[0, 1, 2], [3, 4], [5]]
    # The fewest devices of any process is 1, the fewest processes of any host 1: only
    # device 0 of process 0 of each host goes between hosts.
    assert layout["thread_owners"] == 1 and layout["process_owners"] == 1
    assert layout["process_peers"][0] == [0, 2] and layout["process_peers"][1] == []
    assert layout["host_peers"][0] == [0, 3, 5]
    assert layout["host_peers"][2] == [] and layout["host_peers"][4] == []

    layout = _accl.group_layout(places_of([[2, 2], [2, 2]]))
    assert layout["thread_owners"] == 2 and layout["process_owners"] == 2
    assert layout["process_peers"][1] == [1, 3]  # device 1 of both processes of host 0
    assert layout["host_peers"][3] == [3, 7]  # device 1 of process 1 of every host
    # Ranks interleaved across hosts: a host is where a rank lives, not a rank range.
    layout = _accl.group_layout([("a", 0), ("b", 1), ("a", 0), ("b", 1)])
    assert layout["hosts"] == [[0, 2], [1, 3]]
    assert layout["host_peers"] == [[0, 1], [0, 1], [2, 3], [2, 3]]
