"""jax_accl across real processes: one host (shared memory), and several hosts made of
network namespaces with two rails each (TCP). Every result is checked inside the
workers, against jax.lax.psum over JAX's gloo collectives on one host and against
across namespaces too (gloo bound to rail 0)."""

import json
import subprocess
import sys

import pytest

from jax_accl import _accl, cost_model
from jax_accl.plan import places_of, runtime_plan
from jax_accl.plan.schedule import slice_parts
from jax_accl.plan.topology import Topology
from jax_accl.testing import launch, netns

WORKER = launch.WORKER


def run(processes, devices, scenario, *, extra=(), env=None, **kw):
    env = [{"JAX_ACCL_TIMEOUT_S": "60", **(env[i] if env else {})} for i in range(processes)]
    return launch.run_job(
        [*WORKER, "--scenario", scenario], processes, devices, extra=extra, env=env, **kw
    )


RAILS = "rail0,rail1"


def phases_by_device(trace: list) -> dict:
    """{device: [event names in time order]} from a worker's merged native events."""
    out = {}
    for e in sorted(trace, key=lambda e: e["ts"]):
        out.setdefault(e["tid"], []).append(e)
    return out


def planned_rails(trace: list) -> dict:
    """{device: the rails jax_accl.plan sends its slice on}: every slice on both rails."""
    parts = slice_parts(Topology(2, 1, 2))
    return {d: {f"rail{r}" for _, r in parts} for d in phases_by_device(trace)}


def assert_hierarchical_phases(trace: list, tiers: list, rails: dict | None = None):
    """Each device, inside its call event and in this order: for every pipeline chunk the
    reduce-scatter of every local tier in `tiers` ("local": its process's threads, "host":
    the processes of its host), then chunk by chunk the all-gathers in reverse; the step
    between hosts of chunk c on the rails `rails[device]` (none if not given) after
    chunk c's reduce-scatter and before its all-gather."""
    for device, events in phases_by_device(trace).items():
        call = next(e for e in events if e["name"].startswith("accl_allreduce hierarchical"))
        inter = [e for e in events if e["name"].startswith("inter-host")]
        local = [e for e in events if e is not call and e not in inter]
        names = [e["name"] for e in local]
        chunks = (
            max(1, names.count(f"{tiers[0]} reduce-scatter"))
            if tiers
            else max(1, len(inter) // max(1, len(rails[device]) if rails else 1))
        )
        assert (
            names
            == [f"{t} reduce-scatter" for t in tiers] * chunks
            + [f"{t} all-gather" for t in reversed(tiers)] * chunks
        ), names
        want = rails[device] if rails else set()
        assert {e["name"].rsplit(" ", 1)[-1] for e in inter} == want, [e["name"] for e in inter]
        assert len(inter) == chunks * len(want), [e["name"] for e in inter]
        assert all(e["bytes"] > 0 for e in inter + local)
        for before, e in zip(local, local[1:]):  # the local tiers run one after another
            assert before["ts"] + before["dur"] <= e["ts"] + 1, names
        inter.sort(key=lambda e: e["ts"])
        per_chunk = max(1, len(want))
        scattered = [local[(c + 1) * len(tiers) - 1] for c in range(chunks)] if tiers else []
        gathering = [local[(chunks + c) * len(tiers)] for c in range(chunks)] if tiers else []
        for i, e in enumerate(inter):
            c = i // per_chunk
            if tiers:
                assert scattered[c]["ts"] + scattered[c]["dur"] <= e["ts"] + 1
                assert e["ts"] + e["dur"] <= gathering[c]["ts"] + 1
        for e in local + inter:
            assert call["ts"] <= e["ts"] + 1 and e["ts"] + e["dur"] <= call["ts"] + call["dur"] + 1


def rail_shares(stats: dict) -> dict:
    tcp = {k: v["bytes_sent"] for k, v in stats["transports"].items() if k.startswith("tcp:")}
    total = sum(tcp.values())
    return {k: v / total for k, v in tcp.items()} if total else {}


@pytest.mark.parametrize(
    "processes,devices,cma", [(2, 4, "1"), (4, 2, "1"), (8, 1, "1"), (2, 4, "0")]
)
def test_one_host_matches_gloo_psum(processes, devices, cma, tmp_path):
    results = run(
        processes,
        devices,
        "correctness",
        extra=["--profile-dir", str(tmp_path)],
        env=[{"JAX_ACCL_CMA": cma}] * processes,
    )
    assert len(results) == processes
    for r in results:
        assert r["checks"] == 87
        transports = r["stats"]["transports"]
        # Processes of one host talk through shared memory only: rings for small
        # messages, and for large ones cross-memory attach (unless JAX_ACCL_CMA=0).
        assert transports["shm"]["bytes_sent"] > 0
        assert (transports.get("cma", {}).get("bytes_sent", 0) > 0) == (cma == "1")
        # Peers may ptrace this process only once a group tried cross-memory attach.
        assert r["ptracer"] == [False, cma == "1"]
        assert r["ptracer_after_shutdown"] is False  # revoked by jax.distributed.shutdown()
        assert not any(k.startswith("tcp:") for k in transports)
        assert r["stats"]["algorithms"]["hierarchical"]["calls"] > 0
        assert r["stats"]["algorithms"]["ring"]["calls"] > 0
        assert r["stats"]["refused_connections"] == 0
    hosts = {p["host"] for p in results[0]["topology"]}
    assert len(hosts) == 1
    # The job's secret served its purpose at start-up and left the key-value store.
    assert results[0]["process"] == 0 and results[0]["secret_in_store"] is False
    for r in results:  # the profiled call: 1 MiB
        if cma == "1":  # one reduce-broadcast over all devices, inside the call's event
            for events in phases_by_device(r["trace"]).values():
                by_name = {e["name"]: e for e in events}
                assert set(by_name) == {
                    "accl_allreduce reduce_broadcast 1MiB",
                    "one-host reduce-broadcast cma",
                }, events
                call = by_name["accl_allreduce reduce_broadcast 1MiB"]
                phase = by_name["one-host reduce-broadcast cma"]
                assert phase["bytes"] == 1 << 20
                assert call["ts"] <= phase["ts"] + 1
                assert phase["ts"] + phase["dur"] <= call["ts"] + call["dur"] + 1
        elif devices > 1:
            assert_hierarchical_phases(r["trace"], ["local", "host"])


def host_env(names, rails=RAILS, per_host=1):
    return [
        {"JAX_ACCL_HOST_ID": name, "JAX_ACCL_RAILS": rails}
        for name in names
        for _ in range(per_host)
    ]


@pytest.mark.parametrize("processes,devices", [(2, 2), (4, 1)])
def test_psum_scatter_all_gather_and_ppermute_across_processes_match_gloo(processes, devices):
    results = run(processes, devices, "scatter_gather")
    for r in results:
        assert r["checks"] == 89  # 84 single arrays, 4 leaves of a fused pytree, 1 ragged
        algorithms = r["stats"]["algorithms"]
        # Between processes the small blocks go direct, the large ones around the ring.
        assert algorithms["direct"]["calls"] > 0 and algorithms["ring"]["calls"] > 0
        assert r["stats"]["transports"]["shm"]["bytes_sent"] > 0


@pytest.mark.parametrize("hosts", [1, 2], ids=["one_host", "two_hosts"])
def test_broadcast_and_reduce_across_processes_match_gloo(hosts):
    """2 processes x 2 devices, on one host (shared memory) or as two hosts (TCP over
    loopback): jax_accl.broadcast and reduce (sum, max) over every device and over the
    processes, each result the masked-psum formulation's over gloo (int32 bitwise)."""
    env = hosts_by_id(2) if hosts == 2 else None
    results = run(2, 2, "rooted", env=env, timeout=240)
    for r in results:
        assert r["checks"] == 24
        transports = r["stats"]["transports"]
        if hosts == 2:
            assert any(k.startswith("tcp:") for k in transports), transports
        else:
            assert transports["shm"]["bytes_sent"] > 0, transports


def test_float64_psum_scatter_of_4mib_chunks_is_exact_every_call():
    """jax-ml/jax#40830's reproduction (gloo's psum_scatter returns wrong float64 sums
    now and then at 4 MiB chunks): 2 processes, 150 calls, each result NumPy's exactly."""
    results = run(2, 1, "exact_scatter", extra=["--bytes", str(4 << 20), "--reps", "150"])
    for r in results:
        assert r["checks"] == 150
        assert sum(a["calls"] for a in r["stats"]["algorithms"].values()) >= 150, r["stats"]
    print("gloo's wrong calls:", [r["gloo_wrong_calls"] for r in results], r["stats"]["algorithms"])


def test_psum_scatter_all_gather_and_ppermute_between_hosts_over_both_rails(root_required):
    # Three chunks: the by-host schedules pipelined (their step between hosts on a
    # second thread), as the runtime chooses for blocks of 1 MiB and more.
    with netns.virtual_hosts(2, 2) as names:
        results = run(
            2,
            2,
            "scatter_gather",
            extra=["--gloo-interface", "rail0"],
            env=[dict(e, JAX_ACCL_PIPELINE_CHUNKS="3") for e in host_env(names, per_host=1)],
            namespaces=names,
            coordinator_ip=netns.rail_ip(0, 0),
        )
    for r in results:
        assert r["checks"] == 89  # 84 single arrays, 4 leaves of a fused pytree, 1 ragged
        assert set(rail_shares(r["stats"])) == {"tcp:rail0", "tcp:rail1"}
        # 2 ranks per host: the reduce-scatters and all-gathers run by host (in the
        # host, then between hosts), the permutations flat.
        algorithms = r["stats"]["algorithms"]
        assert algorithms["hierarchical"]["calls"] > 0 and algorithms["direct"]["calls"] > 0


@pytest.mark.parametrize("per_host,devices", [(1, 2), (2, 1)])
def test_all_to_all_by_host_and_direct_between_hosts_match_gloo(root_required, per_host, devices):
    """Two hosts of two ranks (two device threads of one process, or two processes): the
    all-to-all forced direct, forced by host (in the host, then between hosts, pipelined
    in 3 chunks) and as the runtime chooses, every result gloo's."""
    with netns.virtual_hosts(2, 2) as names:
        results = run(
            2 * per_host,
            devices,
            "all_to_all_tiers",
            extra=["--gloo-interface", "rail0"],
            env=[dict(e, JAX_ACCL_PIPELINE_CHUNKS="3") for e in host_env(names, per_host=per_host)],
            namespaces=[n for n in names for _ in range(per_host)],
            coordinator_ip=netns.rail_ip(0, 0),
        )
    for r in results:
        assert r["checks"] == 24
        calls = r["by_host_calls"]
        # 8 calls per setting on each process's devices; direct never runs by host.
        assert calls["direct"] == 0 and calls["hierarchical"] == 8 * devices, calls
        assert set(rail_shares(r["stats"])) == {"tcp:rail0", "tcp:rail1"}


@pytest.mark.parametrize("first", ["pays", "does not pay", "none"])
def test_every_process_stripes_and_plans_by_process_0s_wire(root_required, tmp_path, first):
    """Process 0's stored wire calibration decides for the job: its rails carried together
    1.9x one rail's (both rails), 1.05x (every process stripes over rail0 only), or it has
    none (both rails, the model's own wire), whatever process 1's own file and rail choice
    say; every process plans by the same net_alpha and net_beta; exact results."""

    def cache(name, gain, alpha):
        (tmp_path / name).mkdir()
        if gain is not None:
            wire = {"rails": 2, "one_rail_bytes_per_s": 1e9, "all_rails_bytes_per_s": gain * 1e9}
            (tmp_path / name / "cost_model.json").write_text(
                json.dumps({"wire": {**wire, "net_alpha": alpha}})
            )
        return str(tmp_path / name)

    gains = {"pays": (1.9, 1.05), "does not pay": (1.05, 1.9), "none": (None, 1.05)}[first]
    caches = [cache("p0", gains[0], 31e-6), cache("p1", gains[1], 77e-6)]
    with netns.virtual_hosts(2, 2) as names:
        results = run(
            2,
            2,
            "hierarchy",
            extra=["--gloo-interface", "rail0"],
            # Process 1's rail choice is not the job's: process 0's is.
            env=[
                dict(e, JAX_ACCL_CACHE=c, JAX_ACCL_RAIL_CHOICE="model" if i == 0 else "all")
                for i, (e, c) in enumerate(zip(host_env(names), caches))
            ],
            namespaces=names,
            coordinator_ip=netns.rail_ip(0, 0),
        )
    defaults = _accl.default_cost_model()
    want = {
        "pays": (31e-6, 2 / 1.9e9, {"tcp:rail0", "tcp:rail1"}),
        "does not pay": (31e-6, 1 / 1e9, {"tcp:rail0"}),
        "none": (defaults["net_alpha"], defaults["net_beta"], {"tcp:rail0", "tcp:rail1"}),
    }[first]
    for r in results:
        assert r["checks"] > 0
        assert r["cost_model"]["net_alpha"] == pytest.approx(want[0])
        assert r["cost_model"]["net_beta"] == pytest.approx(want[1])
        assert set(rail_shares(r["stats"])) == want[2]


def test_two_hosts_two_processes_each_over_two_rails(root_required):
    with netns.virtual_hosts(2, 2) as names:
        spaces = [n for n in names for _ in range(2)]
        results = run(
            4,
            2,
            "correctness",
            extra=["--gloo-interface", "rail0"],
            # One connection per rail, as the probe finds on a quiet machine: with more
            # (a busy CPU's probe may find several pay) the messages too short to cut
            # into a stripe per connection all go on rail0's first, and the split is
            # the stripes' test's (test_stripes_wire.py), not this one's.
            env=[{**e, "JAX_ACCL_STRIPES_PER_RAIL": "1"} for e in host_env(names, per_host=2)],
            namespaces=spaces,
            coordinator_ip=netns.rail_ip(0, 0),
        )
    for r in results:
        assert r["checks"] == 87
        transports = r["stats"]["transports"]
        assert transports["shm"]["bytes_sent"] > 0  # the other process of its host
        shares = rail_shares(r["stats"])  # the other host
        assert set(shares) == {"tcp:rail0", "tcp:rail1"}
        assert all(0.35 < s < 0.65 for s in shares.values()), shares
    assert len({p["host"] for p in results[0]["topology"]}) == 2


def test_three_shaped_hosts_stripe_over_both_rails(root_required, tmp_path):
    with netns.virtual_hosts(3, 2, rate_mbit=300) as names:
        results = run(
            3,
            2,
            "bandwidth",
            extra=[
                "--reference",
                "numpy",
                "--bytes",
                str(4 << 20),
                "--reps",
                "2",
                "--profile-dir",
                str(tmp_path),
            ],
            env=host_env(names),
            namespaces=names,
            coordinator_ip=netns.rail_ip(0, 0),
        )
    for r in results:
        shares = rail_shares(r["stats"])
        assert set(shares) == {"tcp:rail0", "tcp:rail1"}
        assert all(0.45 < s < 0.55 for s in shares.values()), shares
        assert r["stats"]["phase_seconds"]["between_hosts"] > 0
        assert_hierarchical_phases(r["trace"], ["local"], planned_rails(r["trace"]))


# hosts x processes per host x devices per process; "2+1" hosts of 2 and 1 processes.
@pytest.mark.parametrize(
    "per_host,devices",
    [((2, 2), 1), ((1, 1), 2), ((2, 2, 2), 1), ((2, 1), 1)],
    ids=["2x2x1", "2x1x2", "3x2x1", "uneven 2+1 x1"],
)
def test_layouts_on_namespaced_hosts_match_gloo_bitwise(root_required, per_host, devices, tmp_path):
    """The hierarchy by host: between hosts each host sends its share once, over both
    rails, however many processes it runs; results equal jax.lax.psum over gloo. The
    profiled call (1 MiB) runs the plan jax_accl.plan prints for the layout: its schedule,
    its algorithm between hosts and its chunks."""
    with netns.virtual_hosts(len(per_host), 2) as names:
        spaces = [name for name, count in zip(names, per_host) for _ in range(count)]
        results = run(
            len(spaces),
            devices,
            "hierarchy",
            extra=["--gloo-interface", "rail0", "--profile-dir", str(tmp_path)],
            env=[{"JAX_ACCL_HOST_ID": ns, "JAX_ACCL_RAILS": RAILS} for ns in spaces],
            namespaces=spaces,
            coordinator_ip=netns.rail_ip(0, 0),
        )
    cost_model.ensure_loaded()  # the constants the workers planned with
    layout = [[devices] * count for count in per_host]
    plan = runtime_plan(places_of(layout), 1 << 20, rails=2)
    for r in results:
        assert r["checks"] == 15
        assert r["stats"]["algorithms"]["hierarchical"]["calls"] > 0
        host = spaces[r["process"]]
        # This process's place among its host's processes: the first min(per_host) of
        # every host own a slice and go between hosts; the others only reduce locally.
        position = r["process"] - spaces.index(host)
        owns = position < min(per_host)
        tcp = {
            k: v["bytes_sent"] for k, v in r["stats"]["transports"].items() if k.startswith("tcp:")
        }
        assert set(tcp) == ({"tcp:rail0", "tcp:rail1"} if owns else set()), tcp
        for events in phases_by_device(r["trace"]).values():
            assert any(e["name"].startswith("inter-host") for e in events) == owns, events
        if owns:
            local_tiers = (["local"] if devices > 1 else []) + (
                ["host"] if spaces.count(host) > 1 else []
            )
            # Each device's slice on the rails the planner sends it on (striped over both).
            assert_hierarchical_phases(r["trace"], local_tiers, planned_rails(r["trace"]))
            for events in phases_by_device(r["trace"]).values():
                names = [e["name"] for e in events]
                inter = [n for n in names if n.startswith("inter-host")]
                assert f"accl_allreduce {plan.schedule} 1MiB" in names, names
                assert {n.split(" rail ")[0] for n in inter} == {f"inter-host {plan.between}"}, (
                    names
                )
                assert len(inter) == plan.chunks * 2, names  # every chunk on both rails


@pytest.mark.parametrize("processes,devices", [(3, 2), (4, 1)])
def test_killed_peer_makes_every_survivor_raise(processes, devices):
    results = run(processes, devices, "survive_kill", killed=(processes - 1,), timeout=120)
    assert len(results) == processes - 1
    for r in results:
        assert r["error"] is not None, "a survivor finished its loop without an error"
        assert "jax_accl" in r["error"]
        assert any(w in r["error"] for w in ("died", "aborted", "closed")), r["error"]
        assert r["seconds_to_error"] < 10, r


# XLA:CPU's pool as XLA sizes it for 2 devices on up to 2 cores (one thread per device):
# only there can a launch's devices be left without a thread (runtime/stall.h); with
# jax_accl's pool a device that makes no call is waited for to the timeout.
XLA_POOL = {"PJRT_NPROC": "2"}


def test_devices_that_never_start_a_launch_are_named_within_seconds():
    # Each process's second device skips the call (as where XLA:CPU never started the
    # launch on it, issue 47): the first process whose watchdog sees it (after about 10 s
    # of idleness) names it, not at the 60 s timeout; the other fails then too, by that
    # one's poisoned channels, if its own watchdog has not spoken first.
    results = run(2, 2, "unstarted_devices", env=[XLA_POOL] * 2, timeout=180)
    for r in results:
        assert r["error"] is not None and "jax_accl" in r["error"], r
        assert r["seconds_to_error"] < 25, r
    said = [r["error"] for r in results if "never started this launch" in r["error"]]
    assert said and "of this process" in said[0] and "PJRT_NPROC" in said[0], results


def test_where_one_process_never_started_some_devices_every_process_fails_within_seconds():
    # Only the last process's second device skips the call: process 0's devices wait for
    # it, and only their peers failing the call can tell them (issue 47's async loop on 2
    # processes: the other process failed at the 120 s timeout).
    results = run(2, 2, "unstarted_in_last_process", env=[XLA_POOL] * 2, timeout=180)
    for r in results:
        assert r["error"] is not None and "jax_accl" in r["error"], r
        assert r["seconds_to_error"] < 25, r
    assert "never started this launch" in results[-1]["error"], results[-1]
    # Process 0 learnt it from process 1's channels (its label names the process).
    assert "process 1" in results[0]["error"], results[0]


@pytest.mark.parametrize("hosts", ["one_host", "hosts_by_id"])
def test_processes_that_finish_at_different_times_and_leave_at_once_all_complete(hosts):
    # Issue 59: every process leaves as soon as its last result is read; a process that
    # finished and left has not failed the call. Within a host (shared memory), and as
    # four hosts over loopback (TCP; the namespaced hosts' test shapes the wire).
    env = hosts_by_id(4) if hosts == "hosts_by_id" else None
    results = run(4, 1, "exit_at_once", extra=["--bytes", str(16 << 20), "--reps", "4"], env=env)
    assert [r["calls"] for r in results] == [4] * 4
    # The group's communicator was asked of the World's registry at its first call only
    # (runtime/group.h), not at each of the 4.
    assert [r["stats"]["communicator_lookups"] for r in results] == [1] * 4


def test_a_group_that_found_cross_memory_attach_refused_plans_without_it(root_required):
    # Issue 60: process 1 runs in a pid namespace of its own (a container of the same
    # host), so its pid means another process to process 0 and cross-memory attach is
    # refused. The group's first large call probes and falls back; the three after it
    # plan without it (the group's learnt answer, not the World's setting), each exact.
    results = run(
        2,
        2,
        "exit_at_once",
        extra=["--bytes", str(4 << 20), "--reps", "4"],
        env=[{"JAX_ACCL_CMA": "1"}] * 2,
        prefixes=[[], ["unshare", "--pid", "--fork"]],
    )
    assert [r["calls"] for r in results] == [4] * 2
    for r in results:
        # Once per rank (2 devices per process): the first call only.
        assert r["stats"]["cma_fallbacks"] == 2, r["stats"]
        assert r["stats"]["transports"].get("cma", {}).get("bytes_sent", 0) == 0
        # What ran instead: each process's half of every call through shared memory.
        assert r["stats"]["transports"]["shm"]["bytes_sent"] >= 4 * (4 << 20) // 2


def test_ranks_in_different_calls_all_raise():
    results = run(2, 2, "mismatch", env=[{"JAX_ACCL_TIMEOUT_S": "20"}] * 2, timeout=120)
    for r in results:
        assert r["error"] is not None and "jax_accl" in r["error"], r
        assert r["seconds_to_error"] < 20, r
    # Whichever rank sees the bad frame first, the reason reaches every rank.
    assert all("different call" in r["error"] for r in results), results


def hosts_by_id(n):
    """n processes as n hosts (JAX_ACCL_HOST_ID), over loopback."""
    return [{"JAX_ACCL_HOST_ID": f"host-{i}", "JAX_ACCL_RAILS": "lo"} for i in range(n)]


FOUR, ONE = {"JAX_ACCL_PIPELINE_CHUNKS": "4"}, {"JAX_ACCL_PIPELINE_CHUNKS": "1"}


@pytest.mark.parametrize(
    "devices,settings,plans",
    [
        (2, [FOUR, ONE], {0: "hierarchical in 4 chunks", 1: "hierarchical in 1 chunk"}),
        (2, [ONE, {"JAX_ACCL_ALGORITHM": "ring"}], {0: "hierarchical", 1: "ring"}),
        (1, [FOUR, ONE, FOUR], {0: "hierarchical in 4 chunks", 1: "hierarchical in 1 chunk"}),
    ],
    ids=["chunks", "algorithm", "three_processes"],
)
def test_processes_that_plan_a_call_differently_both_raise_naming_both_plans(
    devices, settings, plans
):
    """Processes on hosts of their own (JAX_ACCL_HOST_ID, TCP over loopback) configured
    differently plan the same 4 MiB all-reduce differently: the first call's plan check
    (and every frame's header) makes every process raise within seconds (the deadline is
    60 s), each naming both plans and the settings to align, not a length mismatch nor
    a wait for a connection the other plan never makes; a third process whose plan
    agrees with rank 0's raises too."""
    env = [{**host, **setting} for host, setting in zip(hosts_by_id(len(settings)), settings)]
    results = run(len(settings), devices, "plan_mismatch", env=env, timeout=180)
    assert len(results) == len(settings)
    for r in results:
        assert r["error"] is not None, r
        assert r["seconds_to_error"] < 10, r
        assert "plan this call differently" in r["error"], r["error"]
        assert "JAX_ACCL_PIPELINE_CHUNKS" in r["error"] and "JAX_ACCL_ALGORITHM" in r["error"]
        for process, plan in plans.items():
            assert f"process {process} runs {plan}" in r["error"] or (
                f"process {process} {plan}" in r["error"]
            ), r["error"]


def test_processes_with_different_cost_files_plan_by_process_0s_and_are_exact(tmp_path):
    """Two processes of one host, each with a cost model file of its own (another beta,
    and calibrated lines that make ring, or halving-doubling, the fastest for 2 x 2):
    both plan the 4 MiB all-reduce by process 0's file, and it is exact; process 1's
    JAX_ACCL_LINK_GBITS, which process 0 does not set, is not planned by either."""

    def cache(name, fastest, beta):
        lines = {a: {"latency": 1e-3, "per_byte": 1e-8} for a in ONE_HOST_CANDIDATES}
        lines[fastest] = {"latency": 1e-5, "per_byte": 1e-10}
        (tmp_path / name).mkdir()
        stored = {"beta": beta, "one_host": {"2x2": lines}}
        (tmp_path / name / "cost_model.json").write_text(json.dumps(stored))
        return {"JAX_ACCL_CACHE": str(tmp_path / name)}

    env = [
        cache("p0", "ring", 2e-10),
        {**cache("p1", "halving_doubling", 3e-10), "JAX_ACCL_LINK_GBITS": "3"},
    ]
    results = run(2, 2, "plan_mismatch", env=env, timeout=180)
    for r in results:
        assert r["error"] is None, r["error"]
        assert r["stats"]["algorithms"]["ring"]["calls"] > 0, r["stats"]
        assert r["cost_model"] == {**_accl.default_cost_model(), "beta": 2e-10}


ONE_HOST_CANDIDATES = ("direct", "ring", "halving_doubling", "reduce_broadcast")


def test_processes_that_plan_a_call_alike_are_exact():
    """The same job with the same settings in both processes: exact, pipelined."""
    env = [{**host, **FOUR} for host in hosts_by_id(2)]
    results = run(2, 2, "plan_mismatch", env=env, timeout=180)
    for r in results:
        assert r["error"] is None, r["error"]
        assert r["stats"]["algorithms"]["hierarchical"]["calls"] > 0, r["stats"]
        assert any(k.startswith("tcp:") for k in r["stats"]["transports"]), r["stats"]


def test_a_small_dev_shm_is_a_clear_error_on_every_rank_not_a_crash(root_required):
    """/dev/shm a 1 MiB tmpfs (as in a tight container) and no cross-memory attach: the
    rings between the two processes (2 devices each) cannot be allocated. Both raise an
    error naming /dev/shm within a few seconds (the deadline is 30 s), instead of dying
    of SIGBUS at first touch: the creator names its size, and its peers, also those whose
    segment's creator never got to it, see the space marked failed."""
    launcher = (
        "import json, sys\n"
        "from jax_accl.testing import launch\n"
        "results = launch.run_job(launch.WORKER + ['--scenario', 'large_call'], 2, 2,\n"
        "    env=[{'JAX_ACCL_CMA': '0', 'JAX_ACCL_TIMEOUT_S': '30'}] * 2, timeout=120)\n"
        "print('RESULTS ' + json.dumps(results))\n"
    )
    mount_then_run = 'mount -t tmpfs -o size=1m tmpfs /dev/shm && exec "$0" -c "$1"'
    done = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            mount_then_run,
            sys.executable,
            launcher,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULTS "))
    results = json.loads(line[len("RESULTS ") :])
    assert len(results) == 2
    for r in results:
        assert r["error"] is not None and "/dev/shm" in r["error"], r
        assert r["seconds_to_error"] < 5, r
    creator = next(r["error"] for r in results if "cannot allocate" in r["error"])
    assert "1 MiB" in creator and "--shm-size" in creator, creator


def test_concurrent_calls_across_processes_are_exact_and_overlap():
    """Four all-reduces of one program with no dependency among them (2 processes x 2
    devices, one host): each lane on channels of its own, several calls in flight at
    once, every result bitwise exact over 10 launches."""
    results = run(2, 2, "concurrent", extra=["--reference", "numpy", "--reps", "10"])
    for r in results:
        assert r["max_calls_in_flight"] > 2, r


def test_concurrent_calls_across_namespaced_hosts(root_required):
    with netns.virtual_hosts(2, 2) as names:
        results = run(
            2,
            2,
            "concurrent",
            extra=["--reference", "numpy", "--reps", "5"],
            env=[{"JAX_ACCL_HOST_ID": n, "JAX_ACCL_RAILS": RAILS} for n in names],
            namespaces=names,
            coordinator_ip=netns.rail_ip(0, 0),
        )
    for r in results:
        assert r["max_calls_in_flight"] > 2, r


def test_listeners_take_ports_of_the_range_jax_accl_ports_names():
    first = launch.free_port()
    first = min(first, 65535 - 20)
    env = [{"JAX_ACCL_PORTS": f"{first}-{first + 20}"}] * 2
    results = run(2, 2, "correctness", env=env)
    ports = [rail[2] for p in results[0]["topology"] for rail in p["rails"]]
    assert ports and all(first <= port <= first + 20 for port in ports), (first, ports)
    assert all(r["checks"] == 87 for r in results)
