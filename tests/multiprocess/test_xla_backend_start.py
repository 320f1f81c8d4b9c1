"""JAX_ACCL_XLA_COLLECTIVES=1 however the job starts (issue 48): launchers that initialize
jax.distributed through jax._src.distributed.initialize or the global state's method,
and one that re-executes its workers as jax's own test_multiprocess does
(/proc/self/exe, from a virtual environment: the base interpreter, without the
environment's .pth start-up hook), all running a script that never names jax_accl
(scripts/plain_jit.py: jit programs on an Explicit mesh). Each job's collectives are
counted in jax_accl.stats() and its results equal gloo's (integers bitwise); a second
jax.distributed.initialize after a shutdown, in the same processes, runs on jax_accl
again; with 4 CPU devices per process, a program on one process's devices runs on
jax_accl and one whose splits cannot name their device is refused at once; a
collective over only some of the processes runs on jax_accl, split among those only;
a float16 collective XLA's partitioner inserts, which XLA refuses before any MPI call,
fails with XLA's exact error and its workaround runs (scripts/half_collectives.py)."""

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from jax_accl.testing import launch

SCRIPTS = Path(__file__).with_name("scripts")
PLAIN = [str(SCRIPTS / "plain_jit.py")]
# Per process, two runs of plain_jit's step: an int32 sum and a float max (all-reduces),
# and a reshard to replicated (an all-gather); one communicator.
EXPECTED_CALLS = {"MPI_Allreduce": 4, "MPI_Allgather": 2, "MPI_Comm_split": 1}
_gloo: dict[int, list] = {}


def on(accl: bool, n: int, extra=()):
    env = [{"JAX_ACCL_XLA_COLLECTIVES": "1" if accl else "0", "JAX_ACCL_TIMEOUT_S": "60"}] * n
    return launch.run_job(PLAIN, n, 1, extra=list(extra), env=env, timeout=240)


def gloo(n: int) -> list:
    if n not in _gloo:
        _gloo[n] = on(False, n)
        assert all(r["implementation"] == "gloo" and r["calls"] is None for r in _gloo[n])
    return _gloo[n]


def assert_carried_and_equal_to_gloo(results: list, n: int):
    assert sorted(r["process_id"] for r in results) == list(range(n))
    for r in sorted(results, key=lambda r: r["process_id"]):
        g = gloo(n)[r["process_id"]]
        assert r["implementation"] == "mpi", r
        assert r["calls"] == EXPECTED_CALLS, r["calls"]  # jax_accl, imported by its hook
        total, peak, gathered = r["outputs"]
        assert np.asarray(total).dtype.kind == "i"
        np.testing.assert_array_equal(np.asarray(total), np.asarray(g["outputs"][0]))  # bitwise
        np.testing.assert_allclose(peak, g["outputs"][1], rtol=0, atol=0)
        np.testing.assert_allclose(gathered, g["outputs"][2], rtol=0, atol=0)


@pytest.mark.parametrize("init, n", [("module", 2), ("method", 4)])
def test_a_launcher_initializing_through_jax_private_names(init, n):
    """jax._src.distributed.initialize (jax's test_multiprocess) and
    jax._src.distributed.global_state.initialize start jax_accl's side too."""
    assert_carried_and_equal_to_gloo(on(True, n, ["--init", init]), n)


@pytest.mark.parametrize("n", [2, 4])
def test_a_launcher_re_executing_its_workers_under_jax_accl_run(n, monkeypatch):
    """python -m jax_accl.run launcher.py: the launcher's workers are /proc/self/exe
    plain_jit.py, which never import jax_accl and (from a virtual environment) start
    without its .pth hook; jax_accl's MPI library starts it as jaxlib loads it."""
    monkeypatch.delenv("JAX_ACCL_XLA_COLLECTIVES", raising=False)
    monkeypatch.delenv("MPITRAMPOLINE_LIB", raising=False)
    launcher = [str(SCRIPTS / "reexec_launcher.py"), str(n), "--init", "module"]
    done = subprocess.run(
        [sys.executable, "-m", "jax_accl.run", *launcher],
        env=launch.worker_env({"JAX_ACCL_TIMEOUT_S": "60"}),
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert_carried_and_equal_to_gloo([json.loads(line[7:]) for line in lines], n)


def test_a_second_initialize_after_a_shutdown_runs_on_jax_accl_again():
    """In the same 2 processes: jax.distributed.initialize, the step, shutdown, JAX's
    backends cleared (jax requires it), initialize again at the same coordinator, and
    the step on a mesh of the devices in reverse order (a group XLA has not made: a new
    split on the new job). Both sessions' calls on jax_accl, results equal gloo's."""
    ours = sorted(on(True, 2, ["--again"]), key=pid)
    theirs = sorted(on(False, 2, ["--again"]), key=pid)
    for mine, gloos in zip(ours, theirs):
        assert mine["calls"] == EXPECTED_CALLS, mine["calls"]
        assert mine["calls_again"] == {
            "MPI_Allreduce": 8,
            "MPI_Allgather": 4,
            "MPI_Comm_split": 2,  # XLA keeps the first group's communicator across clients
        }, mine["calls_again"]
        for key in ("outputs", "outputs_again"):
            total, peak, gathered = mine[key]
            np.testing.assert_array_equal(np.asarray(total), np.asarray(gloos[key][0]))
            assert np.asarray(total).dtype.kind == "i"
            assert (peak, gathered) == (gloos[key][1], gloos[key][2])


@pytest.mark.parametrize("processes", [2, 1])
def test_several_devices_per_process_a_local_program_runs_and_an_unnamed_split_is_refused(
    processes,
):
    """2 processes x 4 CPU devices, and a job of one process of 4 (XLA:CPU runs its
    collectives through MPI too). A psum over one process's 4 devices: each device's
    thread splits MPI_COMM_WORLD for itself, among those 4 (its device named by the
    program's group), one MPI_Allreduce per device, the sum right. A psum over "a" then
    "b" of a (processes, 2, 2) mesh: groups starting with one device have two of the
    process's devices at place 1, which a split does not tell apart: the program is
    refused when compiled, in every process, naming both devices. The same two psums as
    two programs, each admitted (the earlier ran, or was dispatched, before the later was
    loaded: XLA launches the later once the earlier completed on every device here):
    the one over "a" after the local one ran, the one over "b" while the one over "a",
    dispatched, splits; both sums right, run after run. A program compiled ahead of time
    and not run, whose group puts device 3 where the psum over "a" has 2: a new psum over
    "a" is refused when compiled."""
    env = [{"JAX_ACCL_XLA_COLLECTIVES": "1", "JAX_ACCL_TIMEOUT_S": "60"}] * processes
    results = launch.run_job(
        [str(SCRIPTS / "several_devices.py")], processes, 1, env=env, timeout=180
    )
    x = np.arange(processes * 4, dtype=np.int32).reshape(processes, 2, 2)
    sums = {
        "over_a": np.broadcast_to(x.sum(axis=1, keepdims=True), x.shape),
        "over_b": np.broadcast_to(x.sum(axis=2, keepdims=True), x.shape),
    }
    for p, r in enumerate(sorted(results, key=pid)):
        assert r["local"] == [[6]] * 4, r
        assert r["local_calls"] == {"MPI_Allreduce": 4, "MPI_Comm_split": 4}, r
        for refused, why in [("two_local_axes", "of this program's"), ("after_ahead", "(it had")]:
            error = r[refused]
            assert error == results[0][refused], r  # the same refusal in every process
            assert isinstance(error, str) and error.startswith("AcclError: jax_accl: "), r
            assert "at place 1, where a group" in error and why in error, error
            assert "refuses this program now, when it is compiled or loaded" in error, error
        for name in ("over_a", "over_b"):
            mine = [[int(v)] for v in sums[name][p].reshape(-1)]
            assert r[name] == mine, (name, r)
        assert r["over_a_again"] == r["over_a"], r


COLLECTIVE = [str(SCRIPTS / "collective.py")]


def collective(accl: bool, n: int, *extra, timeout_s: int = 60):
    env = [
        {"JAX_ACCL_XLA_COLLECTIVES": "1" if accl else "0", "JAX_ACCL_TIMEOUT_S": str(timeout_s)}
    ] * n
    return launch.run_job(COLLECTIVE, n, 1, extra=list(extra), env=env, timeout=180)


@pytest.mark.parametrize("op, n, members", [("psum", 4, [0, 1]), ("all_gather", 3, [2, 1])])
def test_a_collective_over_a_subset_of_the_processes_runs_on_jax_accl(op, n, members):
    """A mesh of only some processes: jax's array_test test_shard_map_no_local_devices (a
    psum on processes [0, 1] of 4), and processes [2, 1] of 3 (XLA ranks a group in the
    mesh's order). XLA splits MPI_COMM_WORLD from those processes only; jax_accl makes
    that split among them (the groups read from the compiled program), well within
    JAX_ACCL_TIMEOUT_S (60 s); the others make no MPI call at all. Integers bitwise
    equal to gloo's, and to the sum computed here."""
    args = ["--members", ",".join(map(str, members)), "--op", op]
    start = time.monotonic()
    ours = sorted(collective(True, n, *args), key=pid)
    assert time.monotonic() - start < 45
    theirs = sorted(collective(False, n, *args), key=pid)
    call = {"psum": "MPI_Allreduce", "all_gather": "MPI_Allgather"}[op]
    x = np.arange(len(members) * 4, dtype=np.int64).reshape(len(members), 4)
    x = (x * 1_000_000_007 % 2**32 - 2**31).astype(np.int32)
    expected = x.sum(axis=0, keepdims=True, dtype=np.int32) if op == "psum" else x  # wraps
    for mine, gloos in zip(ours, theirs):
        assert mine["error"] is None and gloos["error"] is None, (mine, gloos)
        assert mine["shards"] == gloos["shards"], (mine, gloos)  # bitwise: int32 as float64
        if mine["process_id"] in members:
            assert mine["calls"] == {"MPI_Comm_split": 1, call: 1}, mine
            np.testing.assert_array_equal(np.asarray(mine["shards"][0], np.int64), expected)
        else:
            assert mine["calls"] == {} and mine["shards"] == [], mine


def test_two_groups_of_one_program_that_start_with_the_same_device_are_made_in_order():
    """A 2 x 2 mesh: a psum over "y" (groups [0, 1], [2, 3]), then one over "x" ([0, 2],
    [1, 3]). Process 0 splits twice with color 0 and key 0 (as jax's pjit_test
    test_sharded_mul does at 8 processes: an all-gather's group and an all-reduce's):
    jax_accl tells them apart by the program's order, each among its own processes.
    Integers bitwise equal to gloo's and to the sum computed here."""
    ours = sorted(collective(True, 4, "--op", "psum_y_then_x"), key=pid)
    theirs = sorted(collective(False, 4, "--op", "psum_y_then_x"), key=pid)
    x = np.arange(4 * 4, dtype=np.int64).reshape(4, 4)
    x = (x * 1_000_000_007 % 2**32 - 2**31).astype(np.int32)
    y = np.stack([x[0] + x[1], x[2] + x[3]]) * np.array([[3], [4]], np.int32)  # wraps
    expected = (y[0] + y[1])[None]
    for mine, gloos in zip(ours, theirs):
        assert mine["error"] is None and gloos["error"] is None, (mine, gloos)
        assert mine["calls"] == {"MPI_Comm_split": 2, "MPI_Allreduce": 2}, mine
        assert mine["shards"] == gloos["shards"]
        np.testing.assert_array_equal(np.asarray(mine["shards"][0], np.int64), expected)


@pytest.mark.parametrize("order", ["AB", "BA"])
def test_two_programs_compiled_before_either_ran_whose_groups_fit_one_split_never_sum_wrong(
    order,
):
    """A 2 x 2 mesh; A: a psum over "y" (groups [0, 1], [2, 3]), B: a psum over both axes
    ([0, 1, 2, 3]), both compiled ahead of time (.lower().compile()) before either runs,
    then the one compiled first run. Processes 0 and 1 split with color 0 and keys 0, 1,
    which A's group [0, 1] and B's fit: jax_accl cannot tell which program runs and
    refuses the split there, naming both groups and what to do (before, AB: a wait for
    processes 2 and 3 until the deadline; BA: a sum over processes 0 and 1 only, with no
    error). Every process either gives gloo's result bitwise (A's [2, 3], which no other
    group fits), or raises: the ambiguity where it is seen, the split's deadline (5 s)
    where the group's other processes refused it (BA: processes 2 and 3)."""
    ours = sorted(collective(True, 4, "--aot", order, timeout_s=5), key=pid)
    theirs = sorted(collective(False, 4, "--aot", order), key=pid)
    for mine, gloos in zip(ours, theirs):
        assert gloos["error"] is None, gloos
        if mine["process_id"] in (0, 1):
            assert mine["error"] is not None and mine["shards"] is None, mine
            for said in (
                "fits two groups XLA may be making now: processes [0, 1] (devices [",
                ") and processes [0, 1, 2, 3] (devices [",
                "were compiled or loaded before either ran",
                "Run each program once right after compiling or loading it (as jax.jit does)",
            ):
                assert said in mine["error"], mine
        elif order == "AB":
            assert mine["error"] is None and mine["shards"] == gloos["shards"], (mine, gloos)
        else:
            assert mine["error"] is not None and mine["shards"] is None, mine
            assert "MPI_Comm_split" in mine["error"], mine


def test_a_deserialized_program_never_sums_over_another_programs_group():
    """Issue 59: B, a psum over 3 processes, serialized in one job and deserialized
    (deserialize_and_load, as an AOT or compile cache does) in the next, where A, a psum
    over processes [0, 1], was compiled ahead of time, kept and not run (one freed would
    no longer count: test_xla_unrun_programs). jax_accl's library was
    told only of compiled programs, not of B: processes 0 and 1 split among A's group and
    summed over those two, every run, while process 2 failed by the deadline. Now every
    program jax loads is told: A's group and B's fit the split of processes 0 and 1, which
    refuse it at once naming both; process 2 fails by the split's deadline (5 s). Never a
    sum but the one over every process (bitwise), and here an error in every process."""
    ours = sorted(collective(True, 3, "--deserialized", timeout_s=5), key=pid)
    assert [r["process_id"] for r in ours] == [0, 1, 2], ours
    x = np.arange(3 * 4, dtype=np.int64).reshape(3, 4) * 1_000_000_007 % 2**32 - 2**31
    expected = x.astype(np.int32).sum(axis=0, keepdims=True, dtype=np.int32)  # wraps
    for r in ours:
        if r["error"] is None:
            np.testing.assert_array_equal(np.asarray(r["shards"][0], np.int64), expected)
    for r in ours:
        assert r["error"] is not None and r["shards"] is None, r
        assert "MPI_Comm_split" in r["error"], r
    for r in ours[:2]:
        for said in (
            "fits two groups XLA may be making now: processes [0, 1] (devices [",
            ") and processes [0, 1, 2] (devices [",
            "were compiled or loaded before either ran",
        ):
            assert said in r["error"], r


def test_float16_is_refused_by_xla_before_any_mpi_call_and_the_workaround_runs():
    """XLA:CPU's MPI collectives have no MPI datatype for float16. JAX's own float16
    collectives (shard_map, pmap) run, carried as uint16/float32 by jax_accl's lowering
    rules (test_half_collectives.py); one XLA's partitioner inserts into a plain jit
    program (here a max's all-reduce) comes after lowering and stays refused: XLA's
    exact error, no call made but the split. The documented workaround (the max taken
    as float32 and cast back) runs on jax_accl and equals gloo's float16 max bitwise."""
    half = [str(SCRIPTS / "half_collectives.py")]
    env = [{"JAX_ACCL_XLA_COLLECTIVES": "1", "JAX_ACCL_TIMEOUT_S": "60"}] * 2
    refused = launch.run_job(half, 2, 1, extra=["--op", "jit_max"], env=env, timeout=180)
    for r in refused:
        assert r["hlo"] == ["all-reduce f16"], r
        assert r["error"] == (
            "JaxRuntimeError: INVALID_ARGUMENT: Unsupported primitive type for reduction: f16"
        ), r
        assert r["calls"] == {"MPI_Comm_split": 1}, r
    extra = ["--op", "jit_max", "--workaround"]
    ours = launch.run_job(half, 2, 1, extra=extra, env=env, timeout=180)
    gloo_env = [{"JAX_ACCL_XLA_COLLECTIVES": "0"}] * 2
    theirs = launch.run_job(half, 2, 1, extra=["--op", "jit_max"], env=gloo_env, timeout=180)
    for mine, gloos in zip(sorted(ours, key=pid), sorted(theirs, key=pid)):
        assert mine["error"] is None and mine["calls"]["MPI_Allreduce"] == 1, mine
        assert gloos["error"] is None and gloos["hlo"] == ["all-reduce f16"], gloos
        assert mine["shards"] == gloos["shards"]  # float16 bits, exactly


def pid(r):
    return r["process_id"]
