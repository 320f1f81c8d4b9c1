"""python -m jax_accl.plan: the schedule jax_accl would run on a cluster, and its cost."""

from __future__ import annotations

import argparse
import collections
import sys

from jax_accl.plan.cost import ALGORITHMS, Constants, busbw, predict_seconds
from jax_accl.plan.schedule import network_steps, slice_parts
from jax_accl.plan.simulate import contention
from jax_accl.plan.topology import FABRICS, Topology
from jax_accl.units import human, parse_size


def describe(t: Topology, algorithm: str) -> list[str]:
    kind, inner = algorithm.split(" ")[:2]
    if kind == "flat":
        return [
            f"  flat {inner} over all {t.ranks} devices (host-major order); between hosts "
            "every flow takes rail 0"
        ]
    rails = collections.Counter(rail for _, rail in slice_parts(t))
    lines = [
        f"  1. local reduce-scatter: {t.devices_per_host} devices per host, in memory",
        f"  2. {inner} among {t.hosts} hosts for each of {t.devices_per_host} slices at "
        f"once, each striped over all {t.rails} rails "
        f"({', '.join(f'rail {r}: {n} slice part(s)' for r, n in sorted(rails.items()))})",
        "  3. local all-gather",
    ]
    if algorithm.endswith("pipelined"):
        lines.append("  phases pipelined over 8 chunks per slice")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jax_accl.plan", description=__doc__)
    parser.add_argument("--hosts", type=int, required=True)
    parser.add_argument("--devices-per-host", type=int, default=8)
    parser.add_argument("--rails", type=int, default=8)
    parser.add_argument("--link-gbps", type=float, default=100.0, help="per rail")
    parser.add_argument("--fabric", choices=FABRICS, default="fat_tree")
    parser.add_argument("--hosts-per-leaf", type=int, default=32)
    parser.add_argument("--size", default="256MiB", help="bytes per device")
    parser.add_argument(
        "--alpha-net-us",
        type=float,
        default=None,
        help="per-step cost between hosts (default: the runtime's)",
    )
    parser.add_argument("--alpha-mem-us", type=float, default=None)
    parser.add_argument("--mem-gbs", type=float, default=None, help="memory bandwidth, GB/s")
    parser.add_argument(
        "--no-contention",
        action="store_true",
        help="skip the per-link flow count (large flat rings are slow)",
    )
    args = parser.parse_args(argv)
    t = Topology(
        args.hosts,
        args.devices_per_host,
        args.rails,
        args.link_gbps,
        args.fabric,
        args.hosts_per_leaf,
    )
    try:
        c = Constants.from_runtime()
    except ImportError:
        c = Constants()
    c = Constants(
        c.alpha_mem_s if args.alpha_mem_us is None else args.alpha_mem_us * 1e-6,
        c.beta_mem_s_per_byte if args.mem_gbs is None else 1 / (args.mem_gbs * 1e9),
        c.gamma_s_per_byte if args.mem_gbs is None else 1 / (args.mem_gbs * 1e9),
        c.alpha_net_s if args.alpha_net_us is None else args.alpha_net_us * 1e-6,
    )
    size = parse_size(args.size)
    print(
        f"# {t.hosts} hosts x {t.devices_per_host} devices, {t.rails} rails of "
        f"{t.link_gbps:g} Gbit/s, {t.fabric} ({t.hosts_per_leaf} hosts per switch), "
        f"{human(size)} per device"
    )
    print(
        f"# constants: alpha {c.alpha_net_s * 1e6:g} us between hosts, "
        f"{c.alpha_mem_s * 1e6:g} us in a host; memory {1 / c.beta_mem_s_per_byte / 1e9:g} GB/s"
    )
    results = {a: predict_seconds(t, a, size, c) for a in ALGORITHMS}
    best = min(results, key=results.get)
    print(f"\nschedule jax_accl picks ({best}):")
    print("\n".join(describe(t, best)))
    print(f"\n{'algorithm':<32} {'time':>11} {'busbw GB/s':>11} {'vs best':>8}  links shared")
    for a, seconds in results.items():
        shared = "-"
        if not args.no_contention and not a.endswith("pipelined"):
            found = contention(t, network_steps(t, " ".join(a.split(" ")[:2])))
            worst = max(found, key=lambda f: f[2]) if found else None
            shared = (
                "none"
                if not found
                else (
                    f"{len(found)} link-steps (worst: {worst[2]} flows on {worst[1]} "
                    f"in step {worst[0]})"
                )
            )
        print(
            f"{a:<32} {seconds * 1e3:>9.3f}ms {busbw(t, size, seconds) / 1e9:>11.2f} "
            f"{seconds / results[best]:>7.2f}x  {shared}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
