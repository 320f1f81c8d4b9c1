"""jax_accl as XLA:CPU's collectives backend (JAX_ACCL_XLA_COLLECTIVES=1): plain jax.jit
programs on Explicit and Auto meshes, one CPU device per process (and 4 per process,
each device's thread an MPI rank of its own), no shard_map of jax_accl's
(jax_accl.testing.jit_worker). Each job runs twice, on jax_accl and over
gloo: results equal (integers bitwise), and every collective the compiled HLO holds is
counted in jax_accl.stats()["xla_collectives"], so none ran elsewhere."""

import json
import subprocess
import sys

import numpy as np
import pytest

from jax_accl.testing import launch, netns

WORKER = ["-m", "jax_accl.testing.jit_worker"]
ALL_PROGRAMS = [
    "data_parallel",
    "fsdp",
    "gather_reshard",
    "transpose_reshard",
    "roll",
    "integer_sums",
    "partial_permute",
    "shard_map_collectives",  # last: the profiled one
]


def job(
    n, programs, *, accl, worker=WORKER, axis_type="explicit", env=None, extra=(), devices=1, **kw
):
    args = [a for p in programs for a in ("--program", p)]
    args += ["--axis-type", axis_type, *extra]
    envs = [
        {"JAX_ACCL_XLA_COLLECTIVES": "1" if accl else "0", "JAX_ACCL_TIMEOUT_S": "60"}
        | (env[i] if env else {})
        for i in range(n)
    ]
    return launch.run_job(worker, n, devices, extra=args, env=envs, timeout=300, **kw)


def expected_calls(hlo: dict, executions: int, n: int) -> dict:
    """The MPI calls XLA:CPU makes for the collectives of `hlo` (jit_worker's counts):
    one per operand of an all-reduce, all-gather or reduce-scatter, n - 1 exchanges per
    all-to-all, one send and one receive per collective-permute (each rank in a cycle)."""
    per_kind = {
        "all-reduce": ("MPI_Allreduce", "buffers", 1),
        "all-gather": ("MPI_Allgather", "buffers", 1),
        "reduce-scatter": ("MPI_Reduce_scatter", "buffers", 1),
        "all-to-all": ("MPI_Sendrecv", "ops", n - 1),
        "collective-permute": ("MPI_Isend MPI_Irecv", "ops", 1),
    }
    out = {}
    for kind, counts in hlo.items():
        functions, unit, factor = per_kind[kind]
        for function in functions.split():
            out[function] = out.get(function, 0) + counts[unit] * factor * executions
    return out


def assert_same(ours, theirs, where=""):
    if isinstance(ours, dict):
        assert ours.keys() == theirs.keys(), where
        for k in ours:
            assert_same(ours[k], theirs[k], f"{where}.{k}")
        return
    if isinstance(ours, list) and ours and isinstance(ours[0], list):
        assert len(ours) == len(theirs), where
        for i, (a, b) in enumerate(zip(ours, theirs)):
            assert_same(a, b, f"{where}[{i}]")
        return
    a, b = np.asarray(ours), np.asarray(theirs)
    assert a.shape == b.shape, where
    if a.dtype.kind in "iub":
        np.testing.assert_array_equal(a, b, err_msg=where)
    else:
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6, err_msg=where)


# Programs whose permutations leave ranks out, and the messages one run makes in all.
PARTIAL_PERMUTES = {"partial_permute": 3}


def assert_carried_and_equal(ours: list, gloo: list, n: int, programs: list, devices: int = 1):
    """`n` processes of `devices` CPU devices each: every device's thread makes XLA's MPI
    calls of its rank, so a process counts `devices` times one rank's."""
    for name, messages in PARTIAL_PERMUTES.items():
        if name in programs:
            for function in ("MPI_Isend", "MPI_Irecv"):
                total = sum(r["programs"][name]["calls"].get(function, 0) for r in ours)
                assert total == messages, (name, function, total)
    for rank, (mine, theirs) in enumerate(zip(ours, gloo)):
        assert mine["enabled"] and not theirs["enabled"]
        assert sorted(mine["programs"]) == sorted(programs)
        for name in programs:
            r, g = mine["programs"][name], theirs["programs"][name]
            assert r["hlo"], f"{name}: no XLA collective to carry"
            assert r["hlo"] == g["hlo"], name
            if name in PARTIAL_PERMUTES:  # not every rank takes part: counted below
                assert r["calls"]["MPI_Allreduce"] == r["hlo"]["all-reduce"]["buffers"], r
            else:
                per_rank = expected_calls(r["hlo"], r["executions"], n * devices)
                assert r["calls"] == {k: v * devices for k, v in per_rank.items()}, (name, r)
            assert g["calls"] == {}, name  # gloo's job: jax_accl made no call
            assert_same(r["outputs"], g["outputs"], f"rank {rank} {name}")


def test_two_processes_every_program_on_jax_accl_equals_gloo(tmp_path):
    ours = job(2, ALL_PROGRAMS, accl=True, extra=["--profile-dir", str(tmp_path)])
    gloo = job(2, ALL_PROGRAMS, accl=False)
    assert_carried_and_equal(ours, gloo, 2, ALL_PROGRAMS)
    kinds = set()
    for r in ours[0]["programs"].values():
        kinds |= set(r["hlo"])
    # Every kind of collective XLA:CPU makes ran on jax_accl.
    assert kinds == {
        "all-reduce",
        "all-gather",
        "reduce-scatter",
        "all-to-all",
        "collective-permute",
    }
    assert ours[0]["programs"]["data_parallel"]["transports"]["shm"] > 0
    # The profile's jax_accl plane has a row per call, named by the MPI function XLA made
    # (the last program: jax.lax's collectives in a shard_map).
    for r in ours:
        calls = {e["call"].split(" on ")[0] for e in r["profile"] if e["name"].startswith("accl_")}
        assert {
            "MPI_Reduce_scatter",
            "MPI_Allgather",
            "MPI_Sendrecv",
            "MPI_Isend",
            "MPI_Irecv",
        } <= calls


def test_two_processes_of_four_devices_each():
    """Several CPU devices per process (jax_num_cpu_devices=4), issue 61's programs: each
    device's thread is an MPI rank of its own in jax_accl's library (its split gives it a
    communicator of its group's 8 devices at its place), the 4 devices of a process meet
    in memory. A plain jit data-parallel step (an all-reduce of its gradients), an
    FSDP-style step (its parameters all-gathered for use, their gradients reduced back
    to shards), reshards that all-gather and all-to-all (MPI_Sendrecv between devices of
    one process and of two) and a roll (collective-permute): the compiled HLO holds the
    collectives each is made for, the same on both jobs; results equal to gloo's at the
    same 2 x 4, and every collective of the compiled HLO counted once per device in
    jax_accl.stats()["xla_collectives"]."""
    programs = ["data_parallel", "fsdp", "gather_reshard", "transpose_reshard", "roll"]
    ours = job(2, programs, accl=True, devices=4)
    gloo = job(2, programs, accl=False, devices=4)
    assert_carried_and_equal(ours, gloo, 2, programs, devices=4)
    made_for = {
        "data_parallel": {"all-reduce"},
        "fsdp": {"all-gather"},
        "gather_reshard": {"all-gather"},
        "transpose_reshard": {"all-to-all"},
        "roll": {"collective-permute"},
    }
    for r in ours:
        for name, kinds in made_for.items():
            assert kinds <= set(r["programs"][name]["hlo"]), (name, r["programs"][name]["hlo"])
        fsdp_grads = set(r["programs"]["fsdp"]["hlo"]) & {"reduce-scatter", "all-reduce"}
        assert fsdp_grads, r["programs"]["fsdp"]["hlo"]
        assert len(r["programs"]["data_parallel"]["outputs"]["w1"]) == 4  # four local shards
        assert len(r["programs"]["fsdp"]["outputs"]["w1"]) == 4


# Plain jit programs (no shard_map) whose collectives only move data: a reshard that
# all-gathers, one that all-to-alls and jnp.roll (a collective-permute).
JIT_ONLY_MOVES = ["gather_reshard", "transpose_reshard", "roll"]


def test_two_processes_on_an_auto_mesh():
    """The jit programs without shard_map on an Auto mesh (sharding constraints, not
    reshard), 2 processes: all-reduces, all-gathers, an all-to-all and a
    collective-permute, all carried by jax_accl. (No reduce-scatter: where a sum's result
    stays sharded, XLA:CPU makes an all-reduce and a slice, Auto or Explicit, jaxlib
    0.10.2; only a shard_map's psum_scatter reaches MPI_Reduce_scatter.)"""
    programs = ["data_parallel", "fsdp", "integer_sums", *JIT_ONLY_MOVES]
    ours = job(2, programs, accl=True, axis_type="auto")
    gloo = job(2, programs, accl=False, axis_type="auto")
    assert_carried_and_equal(ours, gloo, 2, programs)
    hlo = ours[0]["programs"]
    assert set(hlo["gather_reshard"]["hlo"]) == {"all-gather"}, hlo["gather_reshard"]
    assert set(hlo["transpose_reshard"]["hlo"]) == {"all-to-all"}, hlo["transpose_reshard"]
    assert set(hlo["roll"]["hlo"]) == {"collective-permute"}, hlo["roll"]
    assert "all-reduce" in hlo["data_parallel"]["hlo"], hlo["data_parallel"]


@pytest.mark.parametrize("axis_type", ["explicit", "auto"])
def test_four_processes(axis_type):
    programs = ["data_parallel", "fsdp", "transpose_reshard", "roll", "shard_map_collectives"]
    programs += ["partial_permute"]
    ours = job(4, programs, accl=True, axis_type=axis_type)
    gloo = job(4, programs, accl=False, axis_type=axis_type)
    assert_carried_and_equal(ours, gloo, 4, programs)


def test_two_namespaced_hosts_of_two_processes_over_both_rails(root_required):
    programs = ["data_parallel", "fsdp", "integer_sums", "shard_map_collectives", "large_sum"]
    # fsdp's gather is already a reshard that all-gathers: the all-to-all and the roll.
    programs += ["transpose_reshard", "roll"]
    with netns.virtual_hosts(2, 2) as names:
        spaces = [name for name in names for _ in range(2)]
        env = [{"JAX_ACCL_HOST_ID": s, "JAX_ACCL_RAILS": "rail0,rail1"} for s in spaces]
        kw = dict(env=env, namespaces=spaces, coordinator_ip=netns.rail_ip(0, 0))
        ours = job(4, programs, accl=True, **kw)
        gloo = job(4, programs, accl=False, extra=["--gloo-interface", "rail0"], **kw)
    assert_carried_and_equal(ours, gloo, 4, programs)
    for r in ours:
        sent = r["programs"]["large_sum"]["transports"]
        assert sent.get("tcp:rail0", 0) > 0 and sent.get("tcp:rail1", 0) > 0, sent
        assert sent.get("shm", 0) > 0, sent  # the other process of its host


LAUNCHED_SCRIPT = """
import json, sys
import jax  # first, and the script never asks for jax_accl's collectives itself
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
jax.config.update("jax_num_cpu_devices", 1)
jax.distributed.initialize(args["--coordinator"], int(args["--num-processes"]),
                           int(args["--process-id"]))
mesh = jax.make_mesh((jax.device_count(),), ("x",))
x = jax.make_array_from_callback((jax.device_count(), 5), NamedSharding(mesh, P("x")),
                                 lambda i: np.ones((1, 5), np.int32))
total = jax.jit(lambda a: jnp.sum(a, axis=0))(x)
import jax_accl  # only to read its counters
print("RESULT " + json.dumps({
    "total": np.asarray(total.addressable_data(0)).tolist(),
    "implementation": jax_accl._compat.cpu_collectives_implementation(),
    "calls": jax_accl.stats()["xla_collectives"].get("MPI_Allreduce", {}).get("calls", 0),
}), flush=True)
"""


def test_the_launcher_carries_a_script_that_imports_jax_first(tmp_path, monkeypatch):
    """python -m jax_accl.run script.py: the script imports jax first and never sets
    JAX_ACCL_XLA_COLLECTIVES (removed here), yet its all-reduce runs on jax_accl."""
    monkeypatch.delenv("JAX_ACCL_XLA_COLLECTIVES", raising=False)
    monkeypatch.delenv("MPITRAMPOLINE_LIB", raising=False)
    script = tmp_path / "train.py"
    script.write_text(LAUNCHED_SCRIPT)
    results = launch.run_job(["-m", "jax_accl.run", str(script)], 2, 1, timeout=300)
    for r in results:
        assert r["total"] == [2] * 5
        assert r["implementation"] == "mpi"
        assert r["calls"] == 1


def test_importing_jax_first_is_a_clear_error_not_an_exit(tmp_path):
    """Where the start-up hook did not run (Python without site: -S, site-packages put on
    sys.path by hand), importing jax before jax_accl is an AcclError saying what to do."""
    import jax_accl

    site_dir = str(launch.PACKAGE_ROOT.parent)
    assert (launch.PACKAGE_ROOT.parent / "jax_accl_xla_collectives.pth").exists()
    env = launch.worker_env({"JAX_ACCL_XLA_COLLECTIVES": "1"})
    env.pop("MPITRAMPOLINE_LIB", None)
    code = f"import sys; sys.path.append({site_dir!r})\nimport jax\nimport jax_accl"
    assert jax_accl.__file__.startswith(site_dir)
    done = subprocess.run(
        [sys.executable, "-S", "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("jax_accl.errors.AcclError: jax_accl: JAX_ACCL_XLA_COLLECTIVES=1"), last
    assert "python -m jax_accl.run" in last


def test_a_dead_peer_fails_the_survivors_call_with_jax_accls_message():
    results = launch.run_job(
        WORKER,
        2,
        1,
        extra=["--program", "data_parallel", "--die", "1"],
        env=[{"JAX_ACCL_XLA_COLLECTIVES": "1", "JAX_ACCL_TIMEOUT_S": "20"}] * 2,
        killed=(1,),
        timeout=240,
    )
    error = results[0]["error"]
    assert "jax_accl" in error and "MPI_Allreduce" in error, error


def test_a_failed_allocation_or_thread_start_in_an_mpi_call_is_a_jax_error_not_an_abort():
    """A training step (data_parallel: XLA all-reduces the gradients) in 2 processes,
    whose next MPI call fails as a failed allocation, then as a failed thread start,
    would (injected through jax_accl._accl_testing, in both): each run raises
    jax.errors.JaxRuntimeError at float(loss), carrying jax_accl's message naming
    MPI_Allreduce (not SIGABRT: run_job requires every process to exit cleanly), and
    the run after it trains exactly as the first."""
    results = job(
        2,
        ["data_parallel"],
        accl=True,
        extra=["--inject-fault", "allocation", "--inject-fault", "thread_start"],
    )
    expected = {
        "allocation": "out of memory (an allocation failed: std::bad_alloc)",
        "thread_start": "could not start a thread",
    }
    for r in results:
        for kind, text in expected.items():
            failed, after = r["faults"][kind]["failed"], r["faults"][kind]["after"]
            assert failed is not None, (kind, r)
            assert (failed["module"], failed["type"]) == ("jax.errors", "JaxRuntimeError"), failed
            assert f"jax_accl: MPI_Allreduce: {text}" in failed["message"], failed
            assert after.get("outputs") == r["first"], (kind, after)


# The MPI functions a survivor's error may name when its peer dies in a program's call.
MID_CALL_DEATHS = {
    "data_parallel": ("MPI_Allreduce",),  # XLA's gradient all-reduce
    "roll": ("MPI_Isend", "MPI_Irecv", "MPI_Wait"),  # its collective-permute
}


@pytest.mark.parametrize("program", sorted(MID_CALL_DEATHS))
def test_a_peer_killed_during_a_call_fails_the_survivors_call_long_before_the_timeout(
    tmp_path, program
):
    """Both processes run the program back to back; 2 s in, a timer thread SIGKILLs
    process 1 (its main thread in a run), so process 0 is in a call with it or entering
    the next. With a 120 s collective timeout, process 0's call fails within 30 s of the
    kill, with jax_accl's message naming the MPI call; so does its next run, at once,
    without waiting for the dead process in a recovery (XLA makes the next call of a
    collective after one failed, e.g. the next operand's, so that wait held the error
    back until the timeout)."""
    note = tmp_path / "killed_at"
    results = job(
        2,
        [program],
        accl=True,
        extra=["--die", "1", "--die-mid-call", "2", "--kill-note", str(note)],
        env=[{"JAX_ACCL_TIMEOUT_S": "120"}] * 2,
        killed=(1,),
    )
    survivor, killed_at = results[0], float(note.read_text())
    error = survivor["error"]
    latency = survivor["error_at"] - killed_at
    began = latency - survivor["failing_run_s"]  # the failing run's start, from the kill
    print(f"{program}: {survivor['runs']} runs, then the failing one began {began:+.3f} s from")
    print(f"the kill and failed {latency:.2f} s after it: {error[-400:]}")
    assert survivor["runs"] > 0  # the two ran the program together until the kill
    assert began < 1.0, began  # in a run at the kill, or entering the next
    assert "jax_accl" in error and any(f in error for f in MID_CALL_DEATHS[program]), error
    assert "died" in error, error  # the peer's death, not the collective timeout
    assert 0 <= latency < 30, (latency, error)
    later = survivor["later_error"]
    print(f"the next run failed in {survivor['later_run_s']:.2f} s: {later[-300:]}")
    # The group cannot recover (or, for a point-to-point lane whose channel saw it first,
    # the peer died): at once either way, never the collective timeout.
    assert ("cannot recover" in later and "restart the job" in later) or "died" in later, later
    assert survivor["later_run_s"] < 10, survivor


@pytest.mark.parametrize(
    "strategy,collectives,calls",
    [
        ("dp", {"all-reduce": 1}, {"MPI_Allreduce": 9}),  # 8 gradients and the loss
        ("fsdp", {"all-reduce": 1, "all-gather": 8}, {"MPI_Allreduce": 9, "MPI_Allgather": 8}),
    ],
)
def test_the_jit_demo_trains_alike_on_jax_accl_and_over_gloo(strategy, collectives, calls):
    done = subprocess.run(
        [sys.executable, "-m", "jax_accl.demo", "--jit", "--processes", "2", "--steps", "5"]
        + ["--strategy", strategy, "--reps", "3", "--json"],
        env=launch.worker_env(),
        capture_output=True,
        text=True,
        timeout=600,
        cwd="/",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")][-1]
    results = json.loads(line[len("RESULT ") :])
    ours, gloo = results["jax_accl"], results["gloo"]
    assert ours["enabled"] and not gloo["enabled"]
    np.testing.assert_allclose(ours["losses"], gloo["losses"], rtol=1e-5)
    np.testing.assert_allclose(ours["sample"], gloo["sample"], rtol=1e-4, atol=1e-6)
    assert ours["compiled_step"] == gloo["compiled_step"] == collectives
    assert ours["calls_per_step"] == calls and gloo["calls_per_step"] == {}
    assert "speedup" in done.stdout
