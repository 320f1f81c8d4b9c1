"""Soak: many random all-reduces, every result checked against NumPy, resident memory
flat; across processes with a failed call injected every so often, each one raised on
every process and recovered from. CI runs the short counts; JAX_ACCL_SOAK=full runs the
documented ones (10,000 native, 10,000 through JAX, 1,000 across processes with a
failure every 200 calls)."""

import ctypes
import os
import resource

import jax
import ml_dtypes
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax_accl
from jax_accl.testing import launch
from jax_accl.testing.threads import allreduce_threads

FULL = os.environ.get("JAX_ACCL_SOAK") == "full"
NATIVE_CALLS = 10_000 if FULL else 1_500
JAX_CALLS = 10_000 if FULL else 600
PROCESS_CALLS = 1_000 if FULL else 100
FAIL_EVERY = 200 if FULL else 25
MAX_BYTES = 4 << 20
DTYPES = ["int32", "int64", "uint8", "float32", "float64", "float16", "bfloat16"]
OPS = {"sum": np.add, "min": np.minimum, "max": np.maximum}
# The documented counts take long: an hour each at most (the short ones: the default).
pytestmark = [pytest.mark.timeout(3600)] if FULL else []


def rss_mib() -> float:
    """Resident memory after returning freed heap pages to the system, so that memory the
    allocator keeps cached in its per-thread arenas (one thread per rank and call here)
    does not count as growth; a leak still does."""
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def random_inputs(rng, n, count, dtype):
    dtype = np.dtype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    if dtype.kind in "iu":
        return [rng.integers(0, 50, count).astype(dtype) for _ in range(n)]
    # Small integers in floats: sums are exact in every float type, in any order.
    return [rng.integers(-4, 5, count).astype(dtype) for _ in range(n)]


def reference(inputs, op):
    with np.errstate(over="ignore"):
        out = inputs[0].copy()
        for x in inputs[1:]:
            out = OPS[op](out, x).astype(x.dtype)
    return out


def test_native_soak():
    rng = np.random.default_rng(2026)
    algorithms = ["auto", "direct", "ring", "halving_doubling", "reduce_broadcast"]
    baseline = None
    for i in range(NATIVE_CALLS):
        n = int(rng.integers(1, 9))
        dtype = DTYPES[rng.integers(len(DTYPES))]
        itemsize = 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize
        count = int(rng.integers(0, MAX_BYTES // itemsize // (64 if i % 16 else 1) + 1))
        op = list(OPS)[rng.integers(len(OPS))]
        inputs = random_inputs(rng, n, count, dtype)
        outputs = allreduce_threads(inputs, op, algorithms[rng.integers(len(algorithms))])
        want = reference(inputs, op)
        for out in outputs:
            np.testing.assert_array_equal(out, want, err_msg=f"call {i}")
        if i == NATIVE_CALLS // 10:
            baseline = rss_mib()
    print(
        f"\nnative soak: {NATIVE_CALLS} calls, resident memory {baseline:.0f} -> "
        f"{rss_mib():.0f} MiB"
    )
    assert rss_mib() - baseline < 64, (baseline, rss_mib())


def test_jax_soak():
    """A pool of compiled programs (meshes, sizes, dtypes, ops, algorithms) called in a
    random order with fresh data."""
    rng = np.random.default_rng(7)
    mesh = jax.make_mesh((2, 4), ("a", "b"))
    programs = []
    for k in range(24):
        axes = [("a",), ("b",), ("a", "b")][k % 3]
        dtype = ["int32", "float32", "float16", "int64"][k % 4]
        op = list(OPS)[k % 3]
        algorithm = ["auto", "direct", "ring", "halving_doubling", "reduce_broadcast"][k % 5]
        count = int(rng.integers(1, MAX_BYTES // 8 // np.dtype(dtype).itemsize))
        fn = jax.jit(
            jax.shard_map(
                lambda x, axes=axes, op=op, algorithm=algorithm: jax_accl.allreduce(
                    x, axes, op=op, algorithm=algorithm
                ),
                mesh=mesh,
                in_specs=P(("a", "b")),
                out_specs=P(("a", "b")),
                check_vma=False,
            )
        )
        programs.append((fn, axes, dtype, op, count))
    baseline = None
    for i in range(JAX_CALLS):
        fn, axes, dtype, op, count = programs[rng.integers(len(programs))]
        host = np.stack(random_inputs(rng, 8, count, dtype)).reshape(2, 4, count)
        x = jax.device_put(host.reshape(8, count), NamedSharding(mesh, P(("a", "b"))))
        got = np.asarray(fn(x)).reshape(2, 4, count)
        want = host
        if "a" in axes:
            want = np.broadcast_to(reference(list(want), op), want.shape)
        if "b" in axes:
            want = np.broadcast_to(
                np.stack([reference(list(row), op) for row in want])[:, None], want.shape
            )
        np.testing.assert_array_equal(got, want, err_msg=f"call {i}")
        if i == JAX_CALLS // 5:
            baseline = rss_mib()
    print(f"\nJAX soak: {JAX_CALLS} calls, resident memory {baseline:.0f} -> {rss_mib():.0f} MiB")
    assert rss_mib() - baseline < 64, (baseline, rss_mib())


@pytest.mark.multiprocess  # a job of 3 processes
@pytest.mark.timeout(1200)  # past the job's own 900 s
def test_multi_process_soak():
    results = launch.run_job(
        [
            *launch.WORKER,
            "--scenario",
            "soak",
            "--reps",
            str(PROCESS_CALLS),
            "--fail-every",
            str(FAIL_EVERY),
        ],
        3,
        2,
        env=[{"JAX_ACCL_TIMEOUT_S": "60"}] * 3,
        timeout=900,
    )
    print(
        f"\nmulti-process soak: {PROCESS_CALLS} calls x 3 processes, resident memory growth "
        f"{[round(r['rss_growth_mib'], 1) for r in results]} MiB, faults injected and raised "
        f"{[r['faults'] for r in results]}, recoveries {[r['recoveries'] for r in results]}"
    )
    injected = PROCESS_CALLS // FAIL_EVERY
    for r in results:
        assert r["calls"] == PROCESS_CALLS  # every call checked exact, also after each fault
        assert r["rss_growth_mib"] < 64, r
        assert r["faults"] == {"injected": injected, "raised": injected}, r
        assert r["recoveries"] == injected, r
