"""One model: for every layout the native tests run, the schedule `python -m jax_accl.plan`
prints and its prediction are the runtime's own plan (xla_ffi/runtime/call_plan.h). The
plan is checked against what the native hierarchical harness (simulated hosts, a thread
per rank) reports each rank ran: the plan the runtime gave it and the phases its run
recorded (a reduce-scatter and an all-gather per local tier and chunk, a step between
hosts per chunk); in one process, against the algorithm the runtime's stats counted."""

import contextlib
import io
import json

import numpy as np
import pytest

from jax_accl import _accl, _accl_testing
from jax_accl.plan import parse_layout, places_of, runtime_plan
from jax_accl.plan.__main__ import main
from jax_accl.plan.runtime import link_constants
from jax_accl.plan.topology import payload_share

# The native tests' layouts (tests/native/test_native_hierarchical.py), as --layout takes them.
LAYOUTS = {
    "2x1x2": "2/2",
    "2x2x1": "1,1/1,1",
    "3x2x1": "1,1/1,1/1,1",
    "2x2x2": "2,2/2,2",
    "3x1x2": "2/2/2",
    "2x4x1": "1,1,1,1/1,1,1,1",
    "uneven 2+1": "1,1/1",
    "uneven 3+2+1": "2,1/2/1",
    "uneven devices": "3/1,1",
    "one host 2x3": "3,3",
    "one host uneven": "1,2,1",
}
RAILS = 2
LINK_GBPS = 0.3  # the namespaced hosts' shaped rails
# The prediction's constants for them: their payload rate with frames of 1500 bytes.
FABRIC = link_constants(LINK_GBPS * payload_share(1500))


def planner(*args) -> tuple[dict, str]:
    """The planner's report as JSON, and as the text it prints."""
    printed = []
    for extra in (["--json"], []):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main([*args, *extra]) == 0
        printed.append(out.getvalue())
    return json.loads(printed[0]), printed[1]


def run_on_simulated_hosts(places, nbytes):
    """Every rank's report of a hierarchical all-reduce of int32 data, checked exact."""
    n, count = len(places), nbytes // 4
    rng = np.random.default_rng(count + n)
    inputs = [rng.integers(-1000, 1000, count, dtype=np.int32) for _ in range(n)]
    outputs = [np.empty_like(x) for x in inputs]
    report = _accl_testing.hierarchical_threads_report(
        places,
        [x.ctypes.data for x in inputs],
        [o.ctypes.data for o in outputs],
        [count] * n,
        [],
        "int32",
        "sum",
        rails=RAILS,
    )
    assert report["errors"] == [""] * n
    for out in outputs:
        np.testing.assert_array_equal(out, np.sum(inputs, axis=0, dtype=np.int32))
    return report["ran"]


def local_tiers(places, rank) -> int:
    """The local tiers `rank` takes part in: its process's threads if it has several, the
    processes of its host (device t of each) if there are several."""
    layout = _accl.group_layout(places)
    threads = places.count(places[rank]) > 1
    return int(threads) + int(len(layout["process_peers"][rank]) > 1)


@pytest.mark.parametrize("nbytes", [4 << 10, 1 << 20, 4 << 20])
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_the_printed_plan_is_the_one_every_rank_runs(name, nbytes):
    places = places_of(parse_layout(LAYOUTS[name]))
    one_host = "/" not in LAYOUTS[name]  # the harness runs the hierarchy: ask for it
    forced = ["--algorithm", "hierarchical", "--no-cma"] if one_host else []
    report, text = planner(
        "--layout", LAYOUTS[name], "--size", str(nbytes), "--rails", str(RAILS),
        "--link-gbps", str(LINK_GBPS), *forced,
    )  # fmt: skip
    plan = report["plan"]
    ran = run_on_simulated_hosts(places, nbytes)
    assert plan["schedule"] == "hierarchical"
    hosts = len(parse_layout(LAYOUTS[name]))
    for rank, r in enumerate(ran):
        assert (r["schedule"], r["chunks"]) == (plan["schedule"], plan["chunks"]), (rank, r)
        owner = bool(_accl.group_layout(places)["host_peers"][rank])
        if owner:  # takes part between hosts: the printed algorithm and protocol
            assert (r["between"], r["protocol"]) == (plan["between"], plan["protocol"]), r
        # What the run recorded: every chunk up and down every local tier of the rank,
        # and between hosts once per chunk where it owns a slice.
        assert (
            r["reduce_scatters"] == r["all_gathers"] == plan["chunks"] * local_tiers(places, rank)
        ), (rank, r)
        assert r["between_hosts"] == (plan["chunks"] if owner and hosts > 1 else 0), (rank, r)
    # The prediction is the runtime's, for the rails at their rate; the text says both.
    native = _accl.plan(
        places,
        nbytes,
        algorithm="hierarchical" if one_host else "auto",
        rails=RAILS,
        chunks=0,
        fabric=FABRIC,
    )
    assert plan["predicted_s"] == native["predicted_s"] > 0
    assert {k: plan[k] for k in ("between", "chunks", "protocol")} == {
        k: native[k] for k in ("between", "chunks", "protocol")
    }
    summary = runtime_plan(
        places, nbytes, algorithm=native["schedule"], rails=RAILS, cma=False, chunks=0,
        fabric=FABRIC,
    ).summary()  # fmt: skip
    assert f"the runtime's plan: {summary}" in text


def test_two_hosts_run_direct_streamed_not_an_eight_chunk_ring():
    """The layout issue 27 names: 2 hosts of 2 processes of 1 device, 4 MiB. The runtime
    runs direct between the two hosts, streamed, in up to 16 chunks."""
    report, text = planner(
        "--hosts", "2", "--processes-per-host", "2", "--devices-per-process", "1",
        "--rails", "2", "--size", "4MiB",
    )  # fmt: skip
    plan = report["plan"]
    assert (plan["schedule"], plan["between"], plan["protocol"]) == (
        "hierarchical",
        "direct",
        "streamed",
    )
    assert 2 <= plan["chunks"] <= 16
    assert [t["tier"] for t in plan["tiers"]] == ["processes", "hosts"]
    ran = run_on_simulated_hosts(places_of([[1, 1], [1, 1]]), 4 << 20)
    assert {(r["between"], r["chunks"], r["protocol"]) for r in ran} == {
        ("direct", plan["chunks"], "streamed")
    }


def test_uneven_hosts_by_process_counts():
    """--processes-per-host per host builds an uneven layout; the plan is the runtime's."""
    report, _ = planner(
        "--hosts", "3", "--processes-per-host", "2,1,1", "--devices-per-process", "2",
        "--rails", "2", "--size", "1MiB",
    )  # fmt: skip
    assert report["layout"] == "2,2/2/2"
    native = _accl.plan(places_of([[2, 2], [2], [2]]), 1 << 20, rails=2, chunks=0)
    assert {k: report["plan"][k] for k in native if k != "tiers"} == {
        k: v for k, v in native.items() if k != "tiers"
    }


@pytest.mark.parametrize("nbytes", [1 << 20, 16 << 20])
def test_one_process_plan_is_the_algorithm_the_runtime_counts(nbytes):
    """8 devices of one process, above the one-shot size: the planner's schedule is the
    algorithm the runtime's own stats count for the call."""
    report, _ = planner("--layout", "8", "--size", str(nbytes))
    schedule = report["plan"]["schedule"]
    n, count = 8, nbytes // 4
    inputs = [np.full(count, r, np.int32) for r in range(n)]
    outputs = [np.empty_like(x) for x in inputs]
    before = _accl.stats()["algorithms"]
    errors = _accl_testing.allreduce_threads(
        [x.ctypes.data for x in inputs],
        [o.ctypes.data for o in outputs],
        [count] * n,
        ["int32"] * n,
        ["sum"] * n,
        ["auto"] * n,
        list(range(n)),
        30.0,
    )
    assert errors == [""] * n
    after = _accl.stats()["algorithms"]
    counted = {a for a in after if after[a]["calls"] > before[a]["calls"]}
    assert counted == {schedule}
    assert after[schedule]["calls"] - before[schedule]["calls"] == n


def test_the_planner_uses_the_runtimes_constants_not_a_copy():
    """Changing the runtime's cost model changes the planner's prediction with it."""
    places = places_of([[1, 1], [1, 1]])
    saved = _accl.get_cost_model()
    try:
        first = runtime_plan(places, 4 << 20, rails=2, chunks=0).predicted_s
        _accl.set_cost_model(net_beta=saved["net_beta"] * 4)
        second = runtime_plan(places, 4 << 20, rails=2, chunks=0).predicted_s
        report, _ = planner("--layout", "1,1/1,1", "--size", "4MiB", "--rails", "2")
    finally:
        _accl.set_cost_model(**saved)
    assert second > first * 1.3
    assert report["plan"]["predicted_s"] == second
