"""Stripes on two namespaced hosts with one rail: where each TCP flow gets a quarter of
the link (htb at 1 Gbit/s, a class per flow capped at 250 Mbit/s, as clouds cap each
flow) process 0's probe stripes the rail over several connections; where one flow fills
the link (tbf at 300 Mbit/s) it keeps one. Every process takes process 0's answer, and
every collective's results are bitwise jax.lax's over gloo."""

from jax_accl import stripes
from jax_accl.testing import launch, netns


def run_on(names, per_host, devices, env_of=lambda i: {}):
    spaces = [n for n in names for _ in range(per_host)]
    env = [
        {"JAX_ACCL_TIMEOUT_S": "60", "JAX_ACCL_HOST_ID": ns, "JAX_ACCL_RAILS": "rail0", **env_of(i)}
        for i, ns in enumerate(spaces)
    ]
    return launch.run_job(
        [*launch.WORKER, "--scenario", "every_collective"],
        len(spaces),
        devices,
        extra=["--gloo-interface", "rail0"],
        env=env,
        namespaces=spaces,
        coordinator_ip=netns.rail_ip(0, 0),
    )


def check_job(results) -> dict:
    """Every process's results exact and its stripes process 0's, which its probe's
    rates explain; returns process 0's."""
    choice = results[0]["stats"]["stripes_per_rail"]
    for r in results:
        assert r["checks"] == 6
        assert r["stats"]["stripes_per_rail"] == choice
        assert r["stats"]["transports"]["tcp:rail0"]["bytes_sent"] > 0
    assert choice["why"] == "probe", choice
    assert choice["stripes"] == stripes.stripes_for(
        choice["one_flow_bytes_per_s"], choice["many_flows_bytes_per_s"], choice["flows"]
    )
    return choice


def test_a_wire_capped_per_flow_is_striped(root_required):
    """Two hosts x two processes: the processes' tier in each host, the capped rail
    between them."""
    with netns.virtual_hosts(2, 1, rate_mbit=1000, flow_cap_mbit=250, prefix="stripes") as names:
        choice = check_job(run_on(names, per_host=2, devices=1))
    assert choice["stripes"] >= 2, choice


def test_a_wire_one_flow_fills_keeps_one_connection(root_required):
    """Two hosts x one process of two devices; process 1's own count is not the job's."""
    with netns.virtual_hosts(2, 1, rate_mbit=300, prefix="stripes") as names:
        env_of = lambda i: {"JAX_ACCL_STRIPES_PER_RAIL": "5"} if i else {}  # noqa: E731
        choice = check_job(run_on(names, per_host=1, devices=2, env_of=env_of))
    assert choice["stripes"] == 1, choice
