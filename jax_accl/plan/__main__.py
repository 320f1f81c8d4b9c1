"""python -m jax_accl.plan: the schedule jax_accl runs on a cluster (the runtime's own plan,
for any layout of hosts, processes and devices), its predicted time, and what the fabric
between the hosts adds to it."""

from __future__ import annotations

import argparse
import json
import sys

from jax_accl.plan import collectives
from jax_accl.plan.cost import ALGORITHMS, busbw_of, plan_for
from jax_accl.plan.runtime import (
    Plan,
    cost_model,
    format_layout,
    group_layout,
    parse_layout,
    places_of,
    regular_layout,
)
from jax_accl.plan.schedule import network_steps
from jax_accl.plan.simulate import contention
from jax_accl.plan.topology import FABRICS, Topology, payload_share
from jax_accl.units import human, parse_size

# Flow patterns larger than this are not walked link by link (direct among many hosts).
MAX_FLOWS = 1 << 18


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m jax_accl.plan", description=__doc__)
    parser.add_argument("--hosts", type=int, default=None, help="required unless --layout")
    parser.add_argument(
        "--processes-per-host",
        default="1",
        help="processes on each host: one number for all, or one per host (e.g. 2,1)",
    )
    parser.add_argument(
        "--devices-per-process",
        type=int,
        default=None,
        help="devices of each process (default: --devices-per-host shared by the host's processes)",
    )
    parser.add_argument("--devices-per-host", type=int, default=8, help="with one process per host")
    parser.add_argument(
        "--layout",
        default="",
        help="per host the devices of each of its processes, hosts separated by /, "
        "e.g. 2,1/2/1 (overrides --hosts and the counts above)",
    )
    parser.add_argument("--rails", type=int, default=8)
    parser.add_argument(
        "--link-gbps",
        type=float,
        default=None,
        help="per rail (default: the rate the runtime's cost model assumes); the runtime "
        "chooses without it, unless --constant sets net_beta",
    )
    parser.add_argument(
        "--mtu", type=int, default=1500, help="of every rail: the payload share of its rate"
    )
    parser.add_argument("--fabric", choices=FABRICS, default="fat_tree")
    parser.add_argument("--hosts-per-leaf", type=int, default=32)
    parser.add_argument("--size", default="256MiB", help="bytes per device")
    parser.add_argument("--algorithm", default="auto", help="as jax_accl.allreduce takes it")
    parser.add_argument(
        "--collective",
        choices=("all_reduce", "reduce_scatter", "all_gather", "ppermute", "all_to_all"),
        default="all_reduce",
        help="what the call computes (reduce_scatter, all_gather, all_to_all: --size is a "
        "device's whole buffer; ppermute: its message, a shift by one device)",
    )
    parser.add_argument(
        "--no-cma", action="store_true", help="cross-memory attach unusable (JAX_ACCL_CMA=0)"
    )
    parser.add_argument(
        "--chunks", type=int, default=None, help="JAX_ACCL_PIPELINE_CHUNKS (default: its value)"
    )
    parser.add_argument(
        "--constant",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a cost-model constant of the runtime (jax_accl.cost_model's names, seconds "
        "and seconds per byte), as a calibration would set it; repeatable",
    )
    parser.add_argument(
        "--alpha-net-us", type=float, default=None, help="--constant net_alpha, in us"
    )
    parser.add_argument(
        "--alpha-mem-us", type=float, default=None, help="--constant alpha and shm_alpha, in us"
    )
    parser.add_argument(
        "--mem-gbs", type=float, default=None, help="memory bandwidth (beta, gamma, shm_beta), GB/s"
    )
    parser.add_argument(
        "--no-contention",
        action="store_true",
        help="skip the per-link flow count (large flat rings are slow)",
    )
    parser.add_argument(
        "--no-alternatives", action="store_true", help="only the runtime's own plan"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser.parse_args(argv)


def layout_of(args) -> list[list[int]]:
    if args.layout:
        return parse_layout(args.layout)
    if args.hosts is None:
        raise SystemExit("python -m jax_accl.plan: --hosts or --layout is required")
    per_host = [int(p) for p in args.processes_per_host.split(",")]
    if len(per_host) == 1:
        per_host *= args.hosts
    if args.devices_per_process is not None:
        return regular_layout(args.hosts, per_host, args.devices_per_process)
    if any(args.devices_per_host % p for p in per_host):
        raise SystemExit(
            "python -m jax_accl.plan: the processes of a host share its devices evenly; "
            "give --devices-per-process"
        )
    return [[args.devices_per_host // p] * p for p in per_host]


def model_of(args) -> dict:
    """The runtime's constants the command line changes (for the choice and the time)."""
    model = {}
    for item in args.constant:
        name, _, value = item.partition("=")
        model[name.strip()] = float(value)
    if args.alpha_net_us is not None:
        model["net_alpha"] = args.alpha_net_us * 1e-6
    if args.alpha_mem_us is not None:
        model["alpha"] = model["shm_alpha"] = args.alpha_mem_us * 1e-6
    if args.mem_gbs is not None:
        model["beta"] = model["gamma"] = model["shm_beta"] = 1 / (args.mem_gbs * 1e9)
    return model


def fabric_steps(t: Topology, plan: Plan):
    """The flow patterns between hosts of `plan`, or None where the fabric has no part
    (one host) or the pattern is too large to walk."""
    if t.hosts < 2:
        return None
    inner = plan.between if plan.schedule == "hierarchical" else plan.schedule
    kind = "hierarchical" if plan.schedule == "hierarchical" else "flat"
    if inner not in ("ring", "halving_doubling", "direct"):
        return None
    flows = t.hosts**2 * t.rails if kind == "hierarchical" else t.ranks**2
    if inner == "direct" and flows > MAX_FLOWS:
        return None
    return network_steps(t, f"{kind} {inner}")


def shared_links(t: Topology, plan: Plan) -> tuple[int, str]:
    """(the most flows on one link in one step, a description of the links shared)."""
    steps = fabric_steps(t, plan)
    if steps is None:
        return 1, "-"
    found = contention(t, steps)
    if not found:
        return 1, "none"
    worst = max(found, key=lambda f: f[2])
    return worst[2], (
        f"{len(found)} link-steps (worst: {worst[2]} flows on {worst[1]} in step {worst[0]})"
    )


def describe(plan: Plan, tiers: dict) -> list[str]:
    """The runtime's plan, tier by tier."""
    if plan.schedule != "hierarchical":
        how = {"one_shot": "one-shot (the last rank to arrive writes every output)"}.get(
            plan.protocol, plan.protocol
        )
        return [f"  {plan.schedule} over all {plan.ranks} devices, {how}"]
    local = [t for t in plan.tiers if t["tier"] != "hosts"]
    lines = [
        "  1. reduce-scatter up the tiers: "
        + ", then ".join(
            f"{t['tier']} of {t['ranks']} ({t['owners']} own a slice, {t['via']})" for t in local
        )
    ]
    hosts = next((t for t in plan.tiers if t["tier"] == "hosts"), None)
    if hosts is not None:
        slices = tiers["thread_owners"] * tiers["process_owners"]
        lines.append(
            f"  2. {hosts['algorithm']} among {hosts['ranks']} hosts for each of {slices} "
            f"slice(s) per host at once, each striped over all {plan.rails} rail(s)"
        )
    lines.append("  3. all-gather down the tiers")
    if plan.chunks > 1:
        lines.append(f"  pipelined over {plan.chunks} chunks, {plan.protocol} between hosts")
    return lines


def main(argv=None) -> int:
    args = parse_args(argv)
    layout = layout_of(args)
    places = places_of(layout)
    tiers = group_layout(places)
    per_host = max(sum(host) for host in layout)
    t = Topology(
        len(layout), per_host, args.rails, args.link_gbps or 1.0, args.fabric, args.hosts_per_leaf
    )
    size = parse_size(args.size)
    model = model_of(args)
    common = dict(rails=args.rails, link_gbps=args.link_gbps, model=model, mtu=args.mtu)
    if args.no_cma:
        common["cma"] = False
    if args.collective != "all_reduce":
        return collectives.report(args, layout, places, size, model, common)
    own = plan_for(places, args.algorithm, size, **common)
    slowdown, shared = (1, "-") if args.no_contention else shared_links(t, own)
    on_fabric = (
        plan_for(places, args.algorithm, size, slowdown=slowdown, **common) if slowdown > 1 else own
    )
    alternatives = {}
    if not args.no_alternatives and len(layout) > 1:
        for a in ALGORITHMS:
            p = plan_for(places, a, size, **common)
            m, links = (1, "-") if args.no_contention else shared_links(t, p)
            alternatives[a] = (p, m, links)
    if args.json:
        print(
            json.dumps(
                {
                    "layout": format_layout(layout),
                    "bytes": size,
                    "plan": {**own.__dict__, "tiers": list(own.tiers)},
                    "fabric": {"slowdown": slowdown, "predicted_s": on_fabric.predicted_s},
                    "alternatives": {a: p.predicted_s for a, (p, _, _) in alternatives.items()},
                }
            )
        )
        return 0
    constants = {**cost_model(), **model}
    rate = (
        f"{args.link_gbps:g} Gbit/s (MTU {args.mtu}: {payload_share(args.mtu):.1%} payload)"
        if args.link_gbps
        else f"{8 / constants['net_beta'] / 1e9:g} Gbit/s (the model's)"
    )
    where = f": {tiers['describe']}" if len(places) <= 64 else ""
    print(
        f"# {format_layout(layout)}{where}; {args.rails} rail(s) of {rate}, "
        f"{t.fabric} ({t.hosts_per_leaf} hosts per switch), {human(size)} per device"
    )
    print(
        "# the runtime's cost model: "
        + ", ".join(f"{k} {v:.3g}" for k, v in constants.items())
        + (f" ({', '.join(sorted(model))} set here)" if model else "")
    )
    print(f"\nthe runtime's plan: {own.summary()}")
    print("\n".join(describe(own, tiers)))
    print(
        f"  predicted {own.predicted_s * 1e3:.3f} ms, busbw "
        f"{busbw_of(own.ranks, size, own.predicted_s) / 1e9:.2f} GB/s; links shared: {shared}"
    )
    if slowdown > 1:
        print(
            f"  on this fabric ({slowdown} flows share the busiest link): "
            f"{on_fabric.predicted_s * 1e3:.3f} ms"
        )
    if alternatives:
        print("\nforced instead (the runtime runs the plan above unless told otherwise):")
        print(
            f"{'schedule':<32} {'time':>11} {'busbw GB/s':>11} {'vs plan':>8}  "
            f"{'protocol, chunks':<18} links shared"
        )
        for a, (p, _, links) in alternatives.items():
            print(
                f"{a:<32} {p.predicted_s * 1e3:>9.3f}ms "
                f"{busbw_of(p.ranks, size, p.predicted_s) / 1e9:>11.2f} "
                f"{p.predicted_s / own.predicted_s:>7.2f}x  "
                f"{f'{p.protocol}, {p.chunks}':<18} {links}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
