"""The planner: schedules reduce every chunk exactly once on every rank (symbolically and
on NumPy data), rings are rings, every rail is used, the flow patterns used at scale
match the explicit schedules, and the rank mapping keeps halving-doubling and ring
contention-free on a rail-optimised fat tree up to 4096 hosts."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jax_accl.plan import (
    Topology,
    check_symbolic,
    contention,
    flat,
    hierarchical,
    network_steps,
    predict_seconds,
    run_numeric,
)

SCHEDULES = {
    "flat ring": lambda t: flat(t, "ring"),
    "flat halving_doubling": lambda t: flat(t, "halving_doubling"),
    "hierarchical ring": lambda t: hierarchical(t, "ring"),
    "hierarchical halving_doubling": lambda t: hierarchical(t, "halving_doubling"),
}

small_topologies = st.builds(
    Topology,
    hosts=st.integers(1, 6),
    devices_per_host=st.integers(1, 4),
    rails=st.integers(1, 4),
    fabric=st.sampled_from(["fat_tree", "bigraph"]),
    hosts_per_leaf=st.integers(1, 3),
)


@settings(max_examples=60, deadline=None)
@given(small_topologies, st.sampled_from(sorted(SCHEDULES)))
def test_every_chunk_reduced_exactly_once_everywhere(topology, name):
    schedule = SCHEDULES[name](topology)
    assert check_symbolic(schedule) == []


@settings(max_examples=25, deadline=None)
@given(small_topologies, st.sampled_from(sorted(SCHEDULES)), st.integers(0, 2**31))
def test_numeric_run_equals_numpy_sum(topology, name, seed):
    schedule = SCHEDULES[name](topology)
    data = np.random.default_rng(seed).integers(-1000, 1000, (schedule.ranks, schedule.chunks, 3))
    result = run_numeric(schedule, data)
    np.testing.assert_array_equal(result, np.broadcast_to(data.sum(0), result.shape))


@settings(max_examples=40, deadline=None)
@given(small_topologies)
def test_ring_steps_send_and_receive_once_per_rank(topology):
    for step in flat(topology, "ring").steps:
        assert sorted(t.src for t in step) == list(range(topology.ranks))
        assert sorted(t.dst for t in step) == list(range(topology.ranks))


@settings(max_examples=40, deadline=None)
@given(small_topologies)
def test_hierarchical_uses_every_rail(topology):
    if topology.hosts < 2:
        return
    rails = {t.rail for step in hierarchical(topology, "ring").steps for t in step if t.rail >= 0}
    assert rails == set(range(topology.rails))


@settings(max_examples=40, deadline=None)
@given(small_topologies, st.sampled_from(sorted(SCHEDULES)))
def test_scale_patterns_match_the_explicit_schedule(topology, name):
    """network_steps (used at scale) lists exactly the host-to-host flow patterns of the
    explicit schedule."""
    d = topology.devices_per_host
    explicit = {
        frozenset((t.src // d, t.dst // d, t.rail) for t in step if t.rail >= 0)
        for step in SCHEDULES[name](topology).steps
    }
    explicit.discard(frozenset())
    at_scale = {frozenset(step) for step in network_steps(topology, name)}
    at_scale.discard(frozenset())
    assert at_scale == explicit


@pytest.mark.parametrize("hosts", [16, 64, 256, 1024, 4096, 3000])
@pytest.mark.parametrize("inner", ["ring", "halving_doubling"])
def test_hierarchical_is_contention_free_on_a_rail_optimised_fat_tree(hosts, inner):
    t = Topology(hosts, 8, 8, 200, "fat_tree", hosts_per_leaf=32)
    assert contention(t, network_steps(t, f"hierarchical {inner}")) == []


def test_bigraph_report_names_the_shared_links():
    """On the two-layer fabric, steps inside one layer are contention-free; the report
    names every link that the layer-crossing steps share."""
    t = Topology(256, 8, 8, 200, "bigraph", hosts_per_leaf=16)
    found = contention(t, network_steps(t, "hierarchical halving_doubling"))
    assert found and all(link[0] == "switch-switch" for _, link, _ in found)
    steps = {k for k, _, _ in found}
    assert len(steps) < len(network_steps(t, "hierarchical halving_doubling"))


def test_predictions_rank_algorithms_sensibly():
    # NVLink-class memory: the runtime's constants for a byte moved and reduced in a host.
    c = {"beta": 1 / 300e9, "gamma": 1 / 300e9, "shm_beta": 1 / 300e9}
    big = Topology(1024, 8, 8, 200)
    times = {
        a: predict_seconds(big, a, 256 << 20, c)
        for a in ["flat ring", "hierarchical ring", "hierarchical halving_doubling"]
    }
    assert times["hierarchical halving_doubling"] < times["hierarchical ring"] < times["flat ring"]
    # Where the links are the bottleneck, more rails take proportionally less time.
    one = predict_seconds(Topology(64, 8, 1, 10), "hierarchical ring", 64 << 20, c)
    eight = predict_seconds(Topology(64, 8, 8, 10), "hierarchical ring", 64 << 20, c)
    assert eight < one / 2
