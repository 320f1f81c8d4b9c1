"""Large calls on a fast wire: unshaped namespaced hosts, where the paths the CPU-bound
regime takes run (windowed reducing receives, halving-doubling between two hosts, the
chunked pipeline beside a processes tier). Every result bitwise against NumPy at 64 and
256 MiB per device; a peer killed in the middle of a 256 MiB call makes its survivor
raise within seconds; a peer 25 s late for one is waited for and the call is exact.
The worker: jax_accl/testing/fast_wire_worker.py."""

import pytest

from jax_accl import _accl
from jax_accl.plan import places_of
from jax_accl.testing import launch, netns

WORKER = ["-m", "jax_accl.testing.fast_wire_worker"]


def run(scenario, per_host, devices, *, killed=(), timeout_s="60", extra=(), env=None, **kw):
    with netns.virtual_hosts(2, 2) as names:  # unshaped: plain veth pairs and a bridge
        spaces = [name for name in names for _ in range(per_host)]
        return launch.run_on_namespaced_hosts(
            [*WORKER, "--scenario", scenario, *extra],
            spaces,
            devices,
            "rail0,rail1",
            env=[{"JAX_ACCL_TIMEOUT_S": timeout_s, **(env or {})}] * len(spaces),
            killed=killed,
            timeout=600,
            **kw,
        )


@pytest.mark.parametrize("per_host,devices", [(1, 1), (2, 1)])
def test_large_calls_on_a_fast_wire_are_exact(root_required, per_host, devices):
    results = run("exact", per_host, devices)
    for r in results:
        assert r["checked"] == [64 << 20, 256 << 20], r
        assert r["stats"]["hierarchical"]["calls"] >= 4, r["stats"]
    # What ran between the two hosts, as the runtime plans it for this layout: the
    # halves exchanged (ring or halving-doubling, the same schedule for two), not direct.
    layout = [[devices] * per_host, [devices] * per_host]
    for size in (64 << 20, 256 << 20):
        plan = _accl.plan(places_of(layout), size, rails=2, chunks=0)
        assert plan["between"] in ("ring", "halving_doubling"), plan


@pytest.mark.parametrize("spin_us,congestion", [("0", "system"), ("200", None)])
def test_small_and_middling_calls_are_exact_whether_waits_spin_or_sleep(
    root_required, spin_us, congestion
):
    """A rank waiting on its sockets looks again for JAX_ACCL_SPIN_US before it sleeps
    in poll(): both ways (0: at once), every size from a few packets to the halves
    exchanged, direct and halving-doubling between the hosts; over connections with
    the system's congestion control and with jax_accl's default (reno)."""
    sizes = ["4KiB", "256KiB", "1MiB", "4MiB"]
    env = {"JAX_ACCL_SPIN_US": spin_us}
    if congestion:
        env["JAX_ACCL_TCP_CONGESTION"] = congestion
    results = run("exact", 1, 1, extra=["--sizes", ",".join(sizes)], env=env)
    for r in results:
        assert r["checked"] == [4 << 10, 256 << 10, 1 << 20, 4 << 20], r
        assert r["spin_us"] == int(spin_us), r  # the knob reached the native waits
        assert r["congestion"] == ("" if congestion == "system" else "reno"), r
    plans = [
        _accl.plan(places_of([[1], [1]]), size, rails=2, chunks=0)["between"]
        for size in (256 << 10, 1 << 20)
    ]
    assert plans == ["direct", "halving_doubling"], plans


def test_a_peer_killed_in_a_256mib_call_makes_its_survivor_raise_at_once(root_required):
    survivor, *_ = run("kill", 1, 1, killed=(1,))
    assert survivor["error"] is not None and "jax_accl" in survivor["error"], survivor
    assert survivor["seconds_to_error"] < 15, survivor


def test_a_peer_25s_late_for_a_256mib_call_is_waited_for(root_required):
    results = run("late", 1, 1)
    on_time = results[0]
    assert 20 < on_time["waited_s"] < 59, on_time
