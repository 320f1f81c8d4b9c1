"""Several CPU devices per process under JAX_ACCL_XLA_COLLECTIVES=1: a program loaded that
never runs makes no later split ambiguous once it cannot run (JAX's thread guard refused
its run, or its executable was collected), while a program loaded and still alive keeps
its groups known (scripts/unrun_programs.py). Before, jax's own thread_guard_test failed
at 2 processes x 4 devices: the global program the guard refused kept its group known,
and the local program's split that fits it too was refused as two programs loaded
before either ran."""

from pathlib import Path

import pytest

from jax_accl.testing import launch

SCRIPT = [str(Path(__file__).with_name("scripts") / "unrun_programs.py")]


def pid(r):
    return r["process_id"]


@pytest.fixture(scope="module")
def results():
    env = [{"JAX_ACCL_XLA_COLLECTIVES": "1", "JAX_ACCL_TIMEOUT_S": "60"}] * 2
    return sorted(launch.run_job(SCRIPT, 2, 1, env=env, timeout=240), key=pid)


def local_sums():
    return [[10]] * 4  # a psum of 1..4 over a process's 4 devices


def test_a_program_the_thread_guard_refused_leaves_the_split_to_the_program_that_runs(results):
    for r in results:
        refused = r["guard_global"]
        assert isinstance(refused, str) and "thread guard was set" in refused, r
        assert r["guard_local"] == local_sums(), r
        # The refused program runs once called from the guard's thread: its group is
        # told again at that run; a psum of 1..8 over the job's 8 devices.
        assert r["guard_global_again"] == [[36]] * 4, r
        # Per device: the local psum's split and all-reduce, then the global one's.
        assert r["guard_calls"] == {"MPI_Allreduce": 8, "MPI_Comm_split": 8}, r


def test_a_program_whose_executable_was_collected_leaves_the_split_to_the_program_that_runs(
    results,
):
    for r in results:
        assert r["freed_collected"] is True, r
        assert r["freed_local"] == local_sums(), r


def test_a_program_loaded_alive_and_unrun_still_makes_the_split_refused(results):
    zero, one = results
    error = zero["kept_local"]
    assert isinstance(error, str) and error.startswith("JaxRuntimeError"), zero
    assert "fits two groups XLA may be making now" in error, error
    assert "of two programs" in error and "refuses it rather than summing" in error, error
    assert one["kept_local"] == local_sums(), one  # its local group starts with its own device


def test_a_refused_program_run_again_is_admitted_again_or_refused_then(results):
    """The refused program, withdrawn, lets a conflicting one be loaded; run again, it is
    judged against it, and refused (before any call, the same in every process)."""
    for r in results:
        assert "thread guard was set" in r["again_refused"], r
        error = r["again"]
        assert error == results[0]["again"], r
        assert isinstance(error, str) and error.startswith("AcclError: jax_accl: "), error
        assert "holds device 0 of process 0 at place 1" in error, error
        assert "(it had not run)" in error, error
        assert "refuses this program now, when it is run again" in error, error
