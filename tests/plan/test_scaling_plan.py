"""The plan between many hosts (issue 49): the streamed ring for large slices, a
latency-optimal schedule for small ones, the step pause of whole-step schedules in the
prediction, and the same model's answer at 1024-4096 hosts."""

import math

import pytest

from jax_accl import _accl
from jax_accl.plan import places_of, regular_layout, runtime_plan
from jax_accl.plan.cost import plan_for
from jax_accl.plan.runtime import link_constants
from jax_accl.plan.topology import payload_share

RAILS = 2
SHAPED = link_constants(0.3 * payload_share(1500))  # the namespaced hosts' 300 Mbit/s rails


def plan(hosts, size, processes=1, devices=1, model=SHAPED, **kw):
    places = places_of(regular_layout(hosts, processes, devices))
    return runtime_plan(places, size, rails=RAILS, model=model, chunks=0, **kw)


def limit_s(hosts, size):
    """Every host sends 2(H-1)/H of the buffer over both rails at their payload rate."""
    return 2 * (hosts - 1) / hosts * size * SHAPED["net_beta"] / RAILS


@pytest.mark.parametrize("hosts", [4, 5, 8, 16])
@pytest.mark.parametrize("size", [4 << 20, 16 << 20, 64 << 20])
def test_large_slices_stream_a_ring_between_hosts_near_the_limit(hosts, size):
    p = plan(hosts, size)
    assert (p.schedule, p.between) == ("hierarchical", "ring")
    assert limit_s(hosts, size) < p.predicted_s < 1.1 * limit_s(hosts, size)


@pytest.mark.parametrize("hosts", [8, 16])
@pytest.mark.parametrize("size", [4 << 10, 64 << 10])
def test_small_messages_run_halving_doubling_between_hosts(hosts, size):
    """Latency-optimal: log2(H) steps each way, not the ring's 2(H-1)."""
    assert plan(hosts, size).between == "halving_doubling"


@pytest.mark.parametrize("hosts", [3, 4, 8])
def test_two_processes_of_two_devices_per_host_ring_large_slices(hosts):
    p = plan(hosts, 64 << 20, processes=2, devices=2)
    assert (p.schedule, p.between) == ("hierarchical", "ring")
    assert p.chunks > 1  # the local tiers pipelined beside the ring


@pytest.mark.parametrize("hosts", [4, 8])
@pytest.mark.parametrize("size", [4 << 20, 16 << 20])
def test_a_chunked_ring_between_hosts_still_streams_every_chunk(hosts, size):
    """The runtime streams a chunk's slice only while its blocks between hosts have two
    pieces of 64 KiB or more (ring_streamed.cc): the plan never cuts the slice finer."""
    p = plan(hosts, size, processes=2, devices=2)
    assert (p.schedule, p.between) == ("hierarchical", "ring")
    slice_per_chunk = size // 4 // p.chunks  # 2 x 2 owners per host
    assert slice_per_chunk // hosts >= 2 * (64 << 10), (p.chunks, slice_per_chunk)


def test_whole_step_schedules_pay_a_pause_per_step_the_streamed_ring_once():
    """Halving-doubling's 2·log2(H) steps each leave the wire idle for net_step (the
    step's own wire time where shorter); the streamed ring pauses once."""
    hosts, size = 8, 16 << 20
    places = places_of(regular_layout(hosts, 1, 1))
    step = _accl.get_cost_model()["net_step_bytes"] * SHAPED["net_beta"]

    def predicted(algorithm, pause):
        model = {**SHAPED, "net_step_bytes": _accl.get_cost_model()["net_step_bytes"] * pause}
        return plan_for(places, algorithm, size, rails=RAILS, link_gbps=None, model=model)

    hd = predicted("hierarchical halving_doubling", 1).predicted_s
    hd_free = predicted("hierarchical halving_doubling", 0).predicted_s
    assert hd - hd_free == pytest.approx(2 * math.log2(hosts) * step, rel=1e-6)
    ring = predicted("hierarchical ring", 1).predicted_s
    ring_free = predicted("hierarchical ring", 0).predicted_s
    assert ring - ring_free == pytest.approx(step, rel=1e-6)
    assert ring < hd


def test_without_a_step_pause_the_two_schedules_differ_by_their_latencies_only():
    """The choice follows the model: on a wire whose steps cost nothing but alpha, both
    move 2(H-1)/H of the buffer and differ by a few alphas."""
    places = places_of(regular_layout(8, 1, 1))
    model = {**SHAPED, "net_step_bytes": 0}
    times = [
        plan_for(places, f"hierarchical {a}", 4 << 20, rails=RAILS, link_gbps=None, model=model)
        for a in ("ring", "halving_doubling")
    ]
    assert times[0].predicted_s == pytest.approx(times[1].predicted_s, rel=0.01)


@pytest.mark.parametrize("hosts", [1024, 4096])
def test_cluster_scale_answers_follow_from_the_same_model(hosts):
    """8 devices x 8 rails of 200 Gbit/s per host, 256 MiB: slices of a few KiB per block
    do not stream, and 2(H-1) ring steps lose to halving-doubling's 2·log2(H)."""
    places = places_of(regular_layout(hosts, 1, 8))
    p = runtime_plan(places, 256 << 20, rails=8, model=link_constants(200 * payload_share(1500)))
    assert p.between == "halving_doubling"
    ring = plan_for(places, "hierarchical ring", 256 << 20, rails=8, link_gbps=200)
    assert ring.predicted_s > p.predicted_s


def test_bench_steps_forces_the_algorithm_between_hosts_and_auto_restores_the_model():
    """_accl.set_between_hosts (bench --steps' "hosts:X"): every hierarchical plan of this
    process runs X between hosts until set back to auto."""
    try:
        _accl.set_between_hosts("halving_doubling")
        assert plan(8, 64 << 20).between == "halving_doubling"
        _accl.set_between_hosts("direct")
        assert plan(5, 64 << 20).between == "direct"
    finally:
        _accl.set_between_hosts("auto")
    assert plan(8, 64 << 20).between == "ring"
    with pytest.raises(ValueError):
        _accl.set_between_hosts("nonsense")
