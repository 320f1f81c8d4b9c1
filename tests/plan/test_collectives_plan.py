"""python -m jax_accl.plan --collective reduce_scatter|all_gather|ppermute|all_to_all: the
runtime's
plan of each (the schedule it runs: direct, ring or by host, the same function the
call path asks), its prediction against the network's limit between hosts, and the
command line's report."""

import contextlib
import io
import json

import pytest

from jax_accl import _accl
from jax_accl.plan import places_of, regular_layout, runtime_plan
from jax_accl.plan.__main__ import main
from jax_accl.plan.collectives import network_limit_s
from jax_accl.plan.runtime import link_constants

RAIL = link_constants(0.3 * 0.95)["net_beta"]  # a 300 Mbit/s rail's payload


def plan_json(*argv) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*argv, "--json"]) == 0
    return json.loads(out.getvalue())


@pytest.mark.parametrize("collective", ["reduce_scatter", "all_gather"])
def test_schedule_by_tier_is_the_runtimes(collective):
    """One process: direct (in place); processes of one host: direct when small, ring when
    large, as plan_scatter_gather says; hosts of several ranks each: by host."""
    one_process = places_of(regular_layout(1, 1, 8))
    one_host = places_of(regular_layout(1, 4, 1))
    hosts = places_of(regular_layout(2, 1, 2))
    for places, nbytes, want in (
        (one_process, 16 << 20, "direct"),
        (one_host, 4 << 10, "direct"),
        (one_host, 16 << 20, "ring"),
        (hosts, 4 << 20, "hierarchical"),
    ):
        got = runtime_plan(places, nbytes, collective=collective).schedule
        assert got == want, (places, nbytes, got)
        if want != "hierarchical":
            peer = len({p for p in places}) == 1
            assert got == _accl.plan_scatter_gather(len(places), nbytes, peer_memory=peer)
    forced = runtime_plan(hosts, 4 << 20, algorithm="ring", collective=collective)
    assert forced.schedule == "ring"  # the flat ring over all ranks, when forced


@pytest.mark.parametrize("collective", ["reduce_scatter", "all_gather"])
def test_by_host_is_pipelined_in_chunks_of_half_a_mebibyte_block(collective):
    """By host, a block (what a rank sends each other host) is cut into one chunk per
    512 KiB, at most 8; below that whole; JAX_ACCL_PIPELINE_CHUNKS forces a count. The
    pipeline's prediction is below the tiers' sum."""
    hosts = places_of(regular_layout(2, 1, 2))  # 4 ranks: a rank's block is 1/4 of 16 MiB
    per_device = (lambda block: block * 4) if collective == "reduce_scatter" else (lambda b: b)
    for block, want in ((256 << 10, 1), (1 << 20, 2), (4 << 20, 8), (64 << 20, 8)):
        got = runtime_plan(hosts, per_device(block), collective=collective)
        assert (got.chunks, got.protocol) == (want, "chunked" if want > 1 else "whole"), block
    whole = runtime_plan(hosts, per_device(4 << 20), collective=collective, chunks=1)
    piped = runtime_plan(hosts, per_device(4 << 20), collective=collective)
    assert whole.chunks == 1 and piped.predicted_s < whole.predicted_s
    assert runtime_plan(hosts, per_device(4 << 20), collective=collective, chunks=3).chunks == 3


@pytest.mark.parametrize("collective", ["reduce_scatter", "all_gather", "ppermute", "all_to_all"])
@pytest.mark.parametrize("rails", [1, 2])
def test_prediction_between_hosts_is_near_the_network_limit(collective, rails):
    """Large buffers between hosts: the by-host schedule (and the shift) send what the
    network limit counts, so the prediction is within 1.2x of it and at least it; two
    rails halve it (over 1.8x one rail); the flat ring sends more."""
    report = plan_json(
        "--hosts", "2", "--devices-per-host", "2", "--rails", str(rails), "--link-gbps", "0.3",
        "--size", "16MiB", "--collective", collective,
    )  # fmt: skip
    predicted, limit = report["plan"]["predicted_s"], report["network_limit_s"]
    expected = network_limit_s(collective, 2, rails, 16 << 20, RAIL, per_host=2)
    assert limit == pytest.approx(expected, rel=0.01)
    assert limit <= predicted <= 1.2 * limit, report
    if collective not in ("ppermute", "all_to_all"):
        assert report["plan"]["schedule"] == "hierarchical"
        assert report["alternatives"]["flat ring"] > predicted
    if rails == 2:
        one = plan_json(
            "--hosts", "2", "--devices-per-host", "2", "--rails", "1", "--link-gbps", "0.3",
            "--size", "16MiB", "--collective", collective,
        )  # fmt: skip
        assert one["plan"]["predicted_s"] > 1.8 * predicted


def test_the_printed_report_names_the_schedule_and_the_limit():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(
            ["--hosts", "2", "--processes-per-host", "2", "--devices-per-process", "1"]
            + ["--rails", "2", "--link-gbps", "0.3", "--size", "4MiB"]
            + ["--collective", "reduce_scatter"]
        )
    text = out.getvalue()
    assert "reduce_scatter of 4.0MiB per device" in text or "reduce_scatter of 4MiB" in text
    assert "by host:" in text and "among the 2 hosts" in text and "2 rail(s)" in text
    assert "the network limit" in text and "flat ring" in text


def test_an_all_to_all_runs_direct_where_no_host_has_two_ranks_and_sends_each_devices_share():
    """Direct (pairwise) in one process, on one host, between hosts of one rank each and
    for large blocks between hosts; between hosts a host sends (H-1)/H of every one of
    its devices' buffers, so the limit scales with the devices a host has."""
    for layout in ((1, 1, 8), (1, 4, 1), (2, 2, 2), (4, 1, 1)):
        for forced in (
            ("auto", "hierarchical") if layout[0] == 1 or layout == (4, 1, 1) else ("auto",)
        ):
            assert (
                runtime_plan(
                    places_of(regular_layout(*layout)),
                    1 << 20,
                    collective="all_to_all",
                    algorithm=forced,
                ).schedule
                == "direct"
            ), (layout, forced)
    one, two = (network_limit_s("all_to_all", 2, 1, 1 << 20, RAIL, per_host=k) for k in (1, 2))
    assert two == pytest.approx(2 * one) and one == pytest.approx(0.5 * (1 << 20) * RAIL)


def test_an_unknown_collective_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown collective 'scatter'"):
        runtime_plan(places_of(regular_layout(1, 2, 1)), 1024, collective="scatter")


@pytest.mark.parametrize("layout", [(2, 2, 2), (16, 1, 8), (4, 2, 1)])
def test_an_all_to_all_of_small_blocks_between_hosts_runs_by_host(layout):
    """Hosts of several ranks, small blocks: the model prefers H - 1 exchanges per rank
    between hosts (by host, after an exchange in the host) to d·(H-1) (direct), and the
    report shows both with the plan's the shorter; forced, each runs as asked."""
    places = places_of(regular_layout(*layout))
    auto = runtime_plan(places, 64 << 10, collective="all_to_all")
    direct = runtime_plan(places, 64 << 10, collective="all_to_all", algorithm="direct")
    by_host = runtime_plan(places, 64 << 10, collective="all_to_all", algorithm="hierarchical")
    assert (auto.schedule, direct.schedule, by_host.schedule) == (
        "hierarchical",
        "direct",
        "hierarchical",
    )
    assert auto.predicted_s == by_host.predicted_s < direct.predicted_s
    hosts, per_process, devices = layout
    report = plan_json(
        "--hosts", str(hosts), "--processes-per-host", str(per_process),
        "--devices-per-process", str(devices), "--size", "64KiB", "--collective", "all_to_all",
    )  # fmt: skip
    assert report["plan"]["schedule"] == "hierarchical"
    assert set(report["alternatives"]) == {"direct", "by host"}
    assert report["alternatives"]["direct"] > report["plan"]["predicted_s"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["--hosts", "2", "--devices-per-host", "4", "--size", "16KiB"]
             + ["--collective", "all_to_all"])  # fmt: skip
    assert "by host: an all-to-all among each host's 4 ranks" in out.getvalue()


@pytest.mark.parametrize(
    "collective,nbytes,algorithm,want",
    [
        # What a rank stages or receives, whichever is more, at most 64 KiB: an
        # all-gather's output is 8 inputs.
        ("all_gather", 8 << 10, "auto", "one_shot"),
        ("all_gather", 9 << 10, "auto", "whole"),
        ("reduce_scatter", 64 << 10, "auto", "one_shot"),
        ("reduce_scatter", 64 << 10, "ring", "whole"),  # forced: not one-shot
        ("all_reduce", 64 << 10, "direct", "one_shot"),
        ("all_reduce", (64 << 10) + 4, "auto", "whole"),
        ("permute", 4 << 10, "auto", "one_shot"),
        ("all_to_all", 4 << 10, "auto", "one_shot"),
        ("ragged_all_to_all", 4 << 10, "auto", "whole"),  # no one-shot writer
    ],
)
def test_small_calls_in_one_process_plan_the_one_shot(collective, nbytes, algorithm, want):
    """The one-shot protocol is the plan's answer (what the runtime runs), for every
    collective with a one-shot writer; not where another algorithm is forced or the
    program spans processes."""
    one_process = places_of(regular_layout(1, 1, 8))
    got = runtime_plan(one_process, nbytes, algorithm=algorithm, collective=collective)
    assert got.protocol == want, got
    spans = runtime_plan(
        one_process, nbytes, algorithm=algorithm, collective=collective, one_shot=False
    )
    assert spans.protocol == "whole", spans
