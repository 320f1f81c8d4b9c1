"""Predicted all-reduce time on a topology: no model of its own. Each schedule is the
runtime's plan (jax_accl.plan.runtime) of the topology's layout, forced to that schedule
("flat X": algorithm X over all devices; "hierarchical X": the hierarchy with X between
hosts, which the runtime would choose itself only where its model prefers X), timed by the
runtime's cost model with the topology's rails at their rate. What Python adds is the
fabric: the payload a rail carries at its line rate (payload_share), and ``slowdown``
(how many flows share the busiest link of a step, from jax_accl.plan.simulate.contention),
which makes every byte between hosts that many times slower.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from jax_accl.plan.runtime import Plan, cost_model, link_constants, places_of, runtime_plan
from jax_accl.plan.topology import Topology, payload_share

ALGORITHMS = (
    "flat ring",
    "flat halving_doubling",
    "hierarchical ring",
    "hierarchical halving_doubling",
    "hierarchical direct",
)


def plan_for(
    places: Sequence[tuple[str, int]],
    algorithm: str,
    size: int,
    *,
    rails: int,
    link_gbps: float | None,
    model: Mapping[str, float] | None = None,
    slowdown: float = 1.0,
    cma: bool | None = None,
    mtu: int = 1500,
    collective: str = "all_reduce",
) -> Plan:
    """The runtime's plan of `algorithm` (a name jax_accl.allreduce takes, "flat X" or
    "hierarchical X") for `size` bytes per device on the group at `places`, its time
    predicted with rails of `link_gbps` Gbit/s line rate (None: the payload rate the
    runtime's model assumes), frames of `mtu` bytes, slowed by `slowdown`; `cma` as
    jax_accl.plan.runtime.runtime_plan takes it. `collective`: another one than the
    all-reduce (reduce_scatter, all_gather, permute), `size` its input per device."""
    net_beta = (
        link_constants(link_gbps * payload_share(mtu))["net_beta"]
        if link_gbps is not None
        else {**cost_model(), **(model or {})}["net_beta"]
    )
    fabric = {"net_beta": net_beta * slowdown}
    kind, _, inner = algorithm.partition(" ")
    forced = (
        {"algorithm": algorithm}  # a name jax_accl.allreduce takes
        if not inner
        else {"algorithm": inner}
        if kind == "flat"
        else {"algorithm": "hierarchical", "between": inner}
    )
    return runtime_plan(
        places,
        size,
        cma=cma,
        rails=rails,
        model=model,
        fabric=fabric,
        collective=collective,
        **forced,
    )


def predict_seconds(
    t: Topology, algorithm: str, size: int, model: Mapping[str, float] | None = None
) -> float:
    """The runtime's predicted time of `algorithm` on topology `t` (rails at t.link_gbps)."""
    return plan_for(
        places_of(t.layout()), algorithm, size, rails=t.rails, link_gbps=t.link_gbps, model=model
    ).predicted_s


def busbw(t: Topology, size: float, seconds: float) -> float:
    return busbw_of(t.ranks, size, seconds)


def busbw_of(n: int, size: float, seconds: float) -> float:
    """The bus bandwidth of an all-reduce of `size` bytes per device over n devices."""
    return size / seconds * 2 * (n - 1) / n if n > 1 and seconds > 0 else 0.0
