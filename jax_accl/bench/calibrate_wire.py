"""`python -m jax_accl.bench --calibrate --hosts 2`: the cost model's wire between hosts
(jax_accl/cost_model.py), measured between two namespaced hosts, and stored.

1. The wire's own rate each way at once (bench/wire.py): each rail alone, then every
   rail at once (with --rate-mbit 0 unshaped veth, where the hosts' CPUs are the limit;
   otherwise the rails shaped to that rate).
2. A step between two hosts: one process per host, jax_accl's direct all-reduce forced at
   WIRE_SIZES over rail0; the line through its times (calibrate.fit_line) has latency
   alpha/2 (direct between two ranks: alpha/2 + S·(beta + gamma)).
3. Stored as "wire" (its rates and net_alpha): every job then plans by process 0's
   (jax_accl.distributed): net_alpha, net_beta from the rails in use, and whether the
   job stripes over every rail (jax_accl.rails.paying).
"""

from __future__ import annotations

from jax_accl import cost_model, rails
from jax_accl.bench import calibrate, sweep, timing, wire
from jax_accl.bench.timing import JOB_TIMEOUT_S
from jax_accl.testing import launch, netns
from jax_accl.units import human

# Small enough that a step's fixed cost shows, large enough to leave Python's noise behind.
WIRE_SIZES = (256 << 10, 64 << 10, 16 << 10, 4 << 10)


def wire_points(reps: int, on_size=None) -> list[dict]:
    """One process of the calibration's job (one per host): the direct all-reduce forced
    between the two hosts at every size of WIRE_SIZES: [{"bytes", "seconds"}]."""
    points = []
    for size in WIRE_SIZES:
        if on_size:
            on_size(size)
        rows, _, _, _, _, _ = sweep.measure(
            size,
            2,
            ["direct"],
            timing.chain_length(size, 0, 2),
            reps,
            baseline=False,
            one_call=False,
        )
        points += [{"bytes": size, "seconds": t} for _, t in rows]
    return points


def fit_wire(points: list[dict], rates: dict, rail_count: int) -> dict:
    """The stored "wire": rails measured, one rail's and all rails' bytes/s each way at
    once (rail0's; all rails' where more than one), net_alpha from the points' line."""
    latency, per_byte = calibrate.fit_line([(p["bytes"], p["seconds"]) for p in points])
    one = rates["rail0"]
    return {
        "rails": rail_count,
        "one_rail_bytes_per_s": one,
        "all_rails_bytes_per_s": rates.get("all rails", one),
        "net_alpha": 2 * latency,
        "direct_per_byte": per_byte,
        "measured": [[p["bytes"], p["seconds"]] for p in points],
    }


def main(args) -> int:
    """Measure the wire between two namespaced hosts with --rails rails, store it, and
    print it with what jobs on it will do."""
    if args.hosts != 2:
        raise SystemExit("--calibrate --hosts: the wire is measured between 2 hosts")
    seconds = args.wire_seconds or 2.0
    with netns.virtual_hosts(
        2, args.rails, rate_mbit=args.rate_mbit or None, mtu=args.mtu
    ) as names:
        rates = wire.measure_rails(names, args.rails, seconds)
        print(f"# the wire each way at once: {wire.describe(rates)}", flush=True)
        points = launch.run_on_namespaced_hosts(
            ["-m", "jax_accl.bench"],
            names,
            1,
            "rail0",
            extra=["--calibrate", "--wire-points", "--reps", str(args.reps)],
            timeout=JOB_TIMEOUT_S,
        )[0]["points"]
    measured = fit_wire(points, rates, args.rails)
    path = cost_model.store({"wire": measured})
    used, why = rails.paying([(f"rail{r}", "", 1.0) for r in range(args.rails)], measured)
    constants = cost_model.wire_constants(measured, len(used))
    print(
        "# a step between two hosts (direct, per op): "
        + ", ".join(f"{human(b)} {t * 1e6:.0f} us" for b, t in measured["measured"])
        + f"; net_alpha {constants['net_alpha'] * 1e6:.1f} us"
    )
    print(
        f"# jobs with {args.rails} rails stripe over {len(used)}"
        + (f" ({why})" if why else "")
        + f"; net_beta {constants['net_beta'] * 1e9:.3f} ns per byte per rail "
        f"({8 / constants['net_beta'] / 1e9:.2f} Gbit/s)"
    )
    print(f"# stored in {path}")
    return 0
