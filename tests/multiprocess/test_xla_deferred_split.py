"""Several CPU devices per process under JAX_ACCL_XLA_COLLECTIVES=1: one jit program whose
two collective groups start with the same device and hold two of a process's devices at
one place (XLA's MPI_Comm_split(color, key) does not say which asks). Where the two
groups' MPI calls differ, the library answers that split with a provisional
communicator bound at its first call to the group whose collectives it matches
(xla_ffi/mpiabi/communicators.cc, bind_provisional): the program runs on jax_accl, its
results equal gloo's (integers bitwise), each HLO collective carried once per device.
Where they are alike, the program is refused when compiled, in every process
(scripts/deferred_split.py)."""

from pathlib import Path

import numpy as np
import pytest

from jax_accl.testing import launch

SCRIPT = [str(Path(__file__).with_name("scripts") / "deferred_split.py")]
PROGRAMS = ("matmul", "matmul_f32", "gathers")


def job(accl: bool) -> list:
    env = [{"JAX_ACCL_XLA_COLLECTIVES": "1" if accl else "0", "JAX_ACCL_TIMEOUT_S": "60"}] * 2
    results = launch.run_job(SCRIPT, 2, 1, env=env, timeout=240)
    return sorted(results, key=lambda r: r["process_id"])


@pytest.fixture(scope="module")
def both():
    return job(True), job(False)


def test_two_groups_of_one_first_device_told_apart_by_their_calls_run_as_on_gloo(both):
    ours, gloo = both
    expected = np.arange(16).reshape(8, 2) @ np.arange(16).reshape(8, 2).T
    for mine, theirs in zip(ours, gloo):
        for name in PROGRAMS:
            r, g = mine[name], theirs[name]
            assert isinstance(r, dict) and isinstance(g, dict), (name, r, g)
            assert r["shards"] == g["shards"], name  # bitwise, floats of integers too
            assert r["kinds"] == g["kinds"], name  # the same program on both
        for index, data in mine["matmul"]["shards"]:
            rows, columns = (slice(*i) for i in index)
            assert np.array_equal(np.asarray(data), expected[rows, columns]), (index, data)
        assert mine["matmul"]["kinds"] == {"all-gather": 1, "all-reduce": 1}, mine
        assert mine["gathers"]["kinds"] == {"all-gather": 2}, mine
        # Each HLO collective carried once per device (4 here); the first two programs'
        # groups are new to XLA once (two splits per device), the last's once more.
        assert mine["matmul"]["calls"] == {
            "MPI_Allgather": 4,
            "MPI_Allreduce": 4,
            "MPI_Comm_split": 8,
        }, mine
        assert mine["matmul_f32"]["calls"] == {"MPI_Allgather": 4, "MPI_Allreduce": 4}, mine
        assert mine["gathers"]["calls"] == {"MPI_Allgather": 8, "MPI_Comm_split": 8}, mine


def test_two_groups_whose_calls_are_alike_are_refused_when_compiled(both):
    ours, gloo = both
    for r in ours:
        error = r["same_calls"]
        assert error == ours[0]["same_calls"]  # the same refusal in every process
        assert isinstance(error, str) and error.startswith("AcclError: jax_accl: "), error
        assert "where a group of this program's that starts with device 0" in error, error
        assert "makes the same MPI call (kind, element type, count)" in error, error
        assert "refuses this program now, when it is compiled or loaded" in error, error
    assert all(isinstance(r["same_calls"], dict) for r in gloo)


def test_a_provisional_communicator_is_bound_by_its_first_call_or_names_the_groups():
    """The library alone (scripts/provisional_split.py, one process of 4 devices): a
    split that may be [0 1]'s or [0 2]'s answers rank 1, size 2; a first call that fits
    neither group's calls fails naming both, never guessing; the next, an all-reduce of
    8 int32, binds it to [0 1] and sums with device 0 (integers, exact); the other
    device's split of the same color and key is then [0 2]'s, its all-gather right."""
    env = [{"JAX_ACCL_XLA_COLLECTIVES": "1", "JAX_ACCL_TIMEOUT_S": "60"}]
    script = [str(Path(__file__).with_name("scripts") / "provisional_split.py")]
    (r,) = launch.run_job(script, 1, 1, env=env, timeout=180)
    one, zero = r["device1"], r["device0"]
    assert (one["rank"], one["size"]) == (1, 2), r
    assert "MPI_Allreduce (int32 x3)" in one["first"], r
    assert "fits none of them" in one["first"] and "refuses it rather than guess" in one["first"]
    assert "[0 1] (all-reduce int32 x8)" in one["first"], r
    assert "[0 2] (all-gather int32 x4)" in one["first"], r
    total = (np.arange(8) + np.arange(8) + 100).tolist()
    assert one["code"] == 0 and zero["code"] == 0 and one["out"] == zero["out"] == total, r
    two, gather = r["device2"], r["device0_gather"]
    assert (two["rank"], two["size"]) == (1, 2), r
    expected = np.arange(4).tolist() + (np.arange(4) + 100).tolist()
    assert two["code"] == 0 and two["out"] == gather["out"] == expected, r
