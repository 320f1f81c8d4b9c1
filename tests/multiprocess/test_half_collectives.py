"""float16 collectives JAX lowers itself (shard_map) with JAX_ACCL_XLA_COLLECTIVES=1:
XLA:CPU's MPI layer has no MPI datatype for f16, so jax_accl's CPU lowering rules
(jax_accl/half_collectives.py) emit an all-gather on uint16 bits and the reductions on
float32 (an all-to-all and a permute go as bytes, float16 as it is). Each runs on
jax_accl (its MPI calls counted), its compiled HLO holds the collective on that type
only, and its result equals gloo's float16
collective bitwise and numpy's reference (a sum in float32 rounded once)
(scripts/half_collectives.py)."""

from pathlib import Path

import numpy as np
import pytest

from jax_accl.testing import launch

SCRIPT = [str(Path(__file__).with_name("scripts") / "half_collectives.py")]
# Each op: its HLO collective and element type, and the MPI calls that carry it.
EXPECTED = {
    "psum": ("all-reduce f32", ("MPI_Allreduce",)),
    "pmap_psum": ("all-reduce f32", ("MPI_Allreduce",)),
    "pmean": ("all-reduce f32", ("MPI_Allreduce",)),
    "pmax": ("all-reduce f32", ("MPI_Allreduce",)),
    "pmin": ("all-reduce f32", ("MPI_Allreduce",)),
    "psum_scatter": ("reduce-scatter f32", ("MPI_Reduce_scatter",)),
    "all_gather": ("all-gather u16", ("MPI_Allgather",)),
    # XLA's MPI layer sends these as bytes: float16 as it is, no rule needed.
    "all_to_all": ("all-to-all f16", ("MPI_Sendrecv",)),
    "ppermute": ("collective-permute f16", ("MPI_Isend", "MPI_Irecv")),
}


def job(accl: bool, n: int, devices: int, op: str, *extra) -> list:
    env = [{"JAX_ACCL_XLA_COLLECTIVES": "1" if accl else "0", "JAX_ACCL_TIMEOUT_S": "60"}] * n
    out = launch.run_job(
        SCRIPT,
        n,
        devices,
        extra=["--op", op, "--devices", str(devices), *extra],
        env=env,
        timeout=240,
    )
    return sorted(out, key=lambda r: r["process_id"])


def blocks(n: int) -> np.ndarray:
    """The script's input, one 2n x 8 block per device (its `inputs`)."""
    rng = np.random.default_rng(61)
    return (rng.standard_normal((n * 2 * n, 8)) * 300).astype(np.float16).reshape(n, 2 * n, 8)


def reference(op: str, n: int) -> np.ndarray:
    """Every device's result, numpy's: sums in float32 rounded once to float16."""
    b = blocks(n)
    total = b.astype(np.float32).sum(axis=0).astype(np.float16)
    if op in ("psum", "pmap_psum"):
        return np.stack([total] * n)
    if op == "pmean":
        return np.stack([total / np.float16(n)] * n)
    if op in ("pmax", "pmin"):
        return np.stack([getattr(np, op[1:])(b, axis=0)] * n)
    if op == "psum_scatter":
        return total.reshape(n, 2, 8)
    if op == "all_gather":
        return np.stack([b.reshape(-1, 8)] * n)
    if op == "all_to_all":  # device i gets block j's i-th pair of rows, for each j
        return b.reshape(n, n, 2, 8).transpose(1, 0, 2, 3).reshape(n, 2 * n, 8)
    return np.roll(b, 1, axis=0)  # ppermute i -> i + 1


def shards_of(results: list) -> np.ndarray:
    bits = [s for r in results for s in r["shards"]]
    return np.array(bits, dtype=np.uint16)


def check(op: str, n: int, devices: int):
    ours, gloos = job(True, n, devices, op), job(False, n, devices, op)
    hlo, calls = EXPECTED[op]
    for r in ours:
        assert r["error"] is None, r
        assert r["hlo"] == [hlo], r["hlo"]
        if devices == 1:  # carried by jax_accl: one call each, on one communicator
            assert r["calls"] == {"MPI_Comm_split": 1, **dict.fromkeys(calls, 1)}, r["calls"]
        else:
            assert all(r["calls"].get(c, 0) >= 1 for c in calls), r["calls"]
    for r in gloos:
        assert r["error"] is None and r["calls"] is None, r
        assert any(h.endswith(" f16") for h in r["hlo"]), r["hlo"]  # gloo's own float16
    total = n * devices
    want = reference(op, total).reshape(total, -1).view(np.uint16)
    np.testing.assert_array_equal(shards_of(ours), want)  # bitwise
    return shards_of(ours), shards_of(gloos)


@pytest.mark.parametrize("op", sorted(EXPECTED))
def test_a_float16_shard_map_collective_runs_on_jax_accl_bitwise_as_gloo(op):
    """2 processes x 1 device: every kind (and a psum in a jax.pmap), bitwise gloo's
    float16 collective (a sum of two float16 rounds once either way)."""
    ours, gloos = check(op, 2, 1)
    np.testing.assert_array_equal(ours, gloos)


@pytest.mark.parametrize("op", ["psum", "pmax", "all_gather", "all_to_all", "ppermute"])
def test_a_float16_collective_with_four_devices_per_process(op):
    """2 processes x 4 devices (8 ranks): the data movement and the max bitwise gloo's;
    the sum rounds once where gloo's float16 sum rounds at each step, so it equals
    numpy's float32 sum rounded once bitwise and gloo's within float16 rounding."""
    ours, gloos = check(op, 2, 4)
    if op == "psum":
        np.testing.assert_allclose(
            ours.view(np.float16).astype(np.float32),
            gloos.view(np.float16).astype(np.float32),
            rtol=8 * 2**-10,
            atol=1,
        )
    else:
        np.testing.assert_array_equal(ours, gloos)
