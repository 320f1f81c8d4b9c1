"""Issue 59, item 2, across processes (2 x 2 devices; in one process:
tests/in_process/test_late_devices.py): a device late but alive before a psum is waited
for, not taken for XLA:CPU's stall (xla_ffi/runtime/stall.h), and the sum is exact; so
is a process stopped (SIGSTOP) and continued while a device computes.
JAX_ACCL_STALL_S is 2 s here (the default 10 s against the issue's 15 s, scaled down):
before the fix the late device's process took it for XLA:CPU's stall within about 6 s
and ended every pending call (its peers' then failed too)."""

from jax_accl.testing import launch

STALL_2_S = {"JAX_ACCL_STALL_S": "2", "JAX_ACCL_TIMEOUT_S": "60"}


def run(scenario, env):
    return launch.run_job(
        [*launch.WORKER, "--scenario", scenario], 2, 2, env=[env] * 2, timeout=180
    )


def test_a_device_at_a_prompt_is_waited_for_by_every_process():
    # jax.debug.breakpoint needs a terminal: a host callback waiting 9 s stands for it.
    for r in run("late_at_prompt", STALL_2_S):
        assert r["error"] is None, r["error"]
        # Every process waited for the late device (9 s), far past the 2 s stall check; a
        # process that began its second run after the late one had (the processes are not
        # in step between runs) counts a little less than 9 s (8.996 s seen under load).
        assert r["seconds"] >= 8, r


def test_a_process_stopped_and_continued_is_not_taken_for_stalled():
    # XLA's own pool size for 2 devices (as many threads as devices), so that the stall
    # check is on: the 8 s the process was stopped are not idleness it watched (before:
    # the stopped process, its watchdog waking after the stop, ended its calls as stalled).
    for r in run("stopped_and_continued", {**STALL_2_S, "PJRT_NPROC": "2"}):
        assert r["error"] is None, r["error"]
        assert r["seconds"] >= 8, r
