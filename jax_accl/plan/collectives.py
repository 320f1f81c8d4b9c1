"""python -m jax_accl.plan --collective reduce_scatter|all_gather|ppermute|all_to_all: the runtime's
plan of a collective that moves data (xla_ffi/runtime/call_plan.h: direct, ring, or by
host: in the host, then among each position's ranks on every host over every rail), its
predicted time, and the network's limit between hosts. ``--size`` is a device's whole
buffer: a reduce-scatter's input, an all-gather's output, an all-to-all's n blocks, the
message of a ppermute (a shift by one device, the pattern the prediction assumes)."""

from __future__ import annotations

import json

from jax_accl.plan.cost import plan_for
from jax_accl.plan.runtime import Plan, cost_model, format_layout
from jax_accl.plan.topology import payload_share
from jax_accl.units import human

# The name the runtime's plan takes for each collective of the command line.
NATIVE = {
    "reduce_scatter": "reduce_scatter",
    "all_gather": "all_gather",
    "ppermute": "permute",
    "all_to_all": "all_to_all",
}


def bus_factor(collective: str, n: int) -> float:
    """nccl-tests' busbw factor: (n-1)/n for reduce-scatter, all-gather and all-to-all, 1
    for a permutation."""
    return 1.0 if collective == "ppermute" else (n - 1) / n


def network_limit_s(
    collective: str, hosts: int, rails: int, size: float, net_beta: float, per_host: int = 1
) -> float:
    """The time the bytes a host must send take over its rails: (H-1)/H of a host's
    buffer for a reduce-scatter or all-gather (its ranks combine theirs first), one
    buffer for the shift, (H-1)/H of each of its `per_host` devices' buffers for an
    all-to-all (nothing combines); 0 on one host."""
    if hosts < 2:
        return 0.0
    share = 1.0 if collective == "ppermute" else (hosts - 1) / hosts
    if collective == "all_to_all":
        share *= per_host
    return share * size * net_beta / rails


def plans(places, collective: str, size: int, common: dict) -> dict[str, Plan]:
    """The runtime's own plan ("auto") and, for comparison, the flat schedules (which the
    native tests force; jax_accl's calls always run the runtime's plan)."""
    n = len(places)
    nbytes = size // n if collective == "all_gather" else size  # the input per device
    out = {"auto": plan_for(places, "auto", nbytes, collective=NATIVE[collective], **common)}
    if collective == "all_to_all":  # direct, or by host where the layout has it
        for name, forced in (("direct", "direct"), ("by host", "hierarchical")):
            p = plan_for(places, forced, nbytes, collective=NATIVE[collective], **common)
            if p.schedule == ("hierarchical" if forced == "hierarchical" else "direct"):
                out[name] = p
    elif collective != "ppermute":
        for forced in ("direct", "ring"):
            out[f"flat {forced}"] = plan_for(
                places, forced, nbytes, collective=NATIVE[collective], **common
            )
    return out


def describe(plan: Plan, collective: str) -> str:
    if collective == "ppermute":
        return "  direct: each device sends its buffer to its destination, striped over the rails"
    if collective == "all_to_all" and plan.schedule != "hierarchical":
        return (
            f"  direct: each of the {plan.ranks} devices sends block b to device b (n - 1 "
            "messages each way), striped over the rails"
        )
    if collective == "all_to_all":
        host, between = plan.tiers
        return (
            f"  by host: an all-to-all among each host's {host['ranks']} ranks ({host['via']}) "
            f"gathers the blocks bound for each position of every host, then an all-to-all "
            f"among the {between['ranks']} hosts for every position at once (one message per "
            f"host pair and position, striped over all {plan.rails} rail(s)), in "
            f"{plan.chunks} chunk(s)"
        )
    if plan.schedule != "hierarchical":
        return f"  {plan.schedule} over all {plan.ranks} devices"
    host, between = plan.tiers
    return (
        f"  by host: {host['algorithm']} among each host's {host['ranks']} ranks "
        f"({host['via']}), then {between['algorithm']} among the {between['ranks']} hosts "
        f"for every position at once, striped over all {plan.rails} rail(s)"
    )


def report(args, layout, places, size: int, model: dict, common: dict) -> int:
    collective = args.collective
    found = plans(places, collective, size, common)
    own = found["auto"]
    net_beta = (
        8.0 / (args.link_gbps * payload_share(args.mtu) * 1e9)
        if args.link_gbps
        else {**cost_model(), **model}["net_beta"]
    )
    per_host = max(sum(host) for host in layout)
    limit = network_limit_s(collective, len(layout), args.rails, size, net_beta, per_host)
    n = len(places)
    busbw = size / own.predicted_s * bus_factor(collective, n) if own.predicted_s else 0.0
    if args.json:
        print(
            json.dumps(
                {
                    "layout": format_layout(layout),
                    "collective": collective,
                    "bytes": size,
                    "plan": {**own.__dict__, "tiers": list(own.tiers)},
                    "network_limit_s": limit,
                    "alternatives": {a: p.predicted_s for a, p in found.items() if a != "auto"},
                }
            )
        )
        return 0
    print(
        f"# {format_layout(layout)}: {collective} of {human(size)} per device, "
        f"{args.rails} rail(s) of {8 / net_beta / 1e9:.3g} Gbit/s payload"
    )
    print(f"\nthe runtime's plan: {own.schedule}, predicted {own.predicted_s * 1e3:.3f} ms")
    print(describe(own, collective))
    line = f"  busbw {busbw / 1e9:.2f} GB/s"
    if limit:
        line += f"; the network limit {limit * 1e3:.3f} ms ({own.predicted_s / limit:.2f}x of it)"
    print(line)
    alternatives = {a: p for a, p in found.items() if a != "auto"}
    if alternatives and not args.no_alternatives:
        print("\nother schedules, for comparison (jax_accl's calls always run the plan above):")
        print(f"{'schedule':<14} {'time':>11} {'vs plan':>8}")
        for a, p in alternatives.items():
            print(f"{a:<14} {p.predicted_s * 1e3:>9.3f}ms {p.predicted_s / own.predicted_s:>7.2f}x")
    return 0
