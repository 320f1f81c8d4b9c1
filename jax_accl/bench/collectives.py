"""``python -m jax_accl.bench.collectives``: jax_accl's psum_scatter, all_gather,
ppermute and all_to_all against jax.lax's, nccl-tests style, in one process of N CPU devices
(jax.lax: XLA's in-process collectives), as several processes (``--processes``) or on
namespaced hosts with shaped rails (``--hosts``, root; jax.lax over gloo on rail0).

Per size (the bytes each device holds): K and 2K ops chained in one jitted
lax.fori_loop, the difference over K, the median of `--reps` interleaved runs (after a
barrier across processes). The ops: scatter+gather (psum_scatter then all_gather, tiled:
an all-reduce's traffic, busbw = algbw·2(n-1)/n), reduce_scatter and all_gather (busbw =
algbw·(n-1)/n; all_gather of a local 1/n slice, reduce_scatter of the whole buffer, its
block written back in place), ppermute (a shift by one device: each device sends its
buffer once, busbw = algbw) and all_to_all (tiled along dimension 0, busbw =
algbw·(n-1)/n; ``--a2a-schedules direct,hierarchical,auto``: one row per schedule the
runtime is asked for, JAX_ACCL_ALGORITHM when compiled). Results are checked against
jax.lax's before timing.
Each row also has its limit: on one host the memory's (the bytes every device must read
and write at least, at the copy bandwidth B of jax_accl.bench.memory), on namespaced
hosts the network's (the bytes a host must send: reduce-scatter and all-gather (H-1)/H
of a host's data, ppermute one device's buffer, all-to-all (H-1)/H of every device's
buffer of the host, over all its rails at the shaped rate; unshaped (``--rate-mbit 0``)
at the rate the wire's own test (jax_accl.bench.wire) measured each way on every rail
at once before the job). Across processes each row also has the CPU seconds per op,
user + system summed over every process (the K-op chain's over K)."""

from __future__ import annotations

import argparse
import json
import statistics

import numpy as np

from jax_accl.plan import collectives as planned
from jax_accl.units import human, parse_size

OPS = ("scatter+gather", "reduce_scatter", "all_gather", "ppermute", "all_to_all")


def bus_factor(op: str, n: int) -> float:
    """The share of the size an op's busbw counts (nccl-tests' factors, the planner's:
    scatter+gather carries an all-reduce's traffic, twice a reduce-scatter's)."""
    if op == "scatter+gather":
        return 2 * planned.bus_factor("reduce_scatter", n)
    return planned.bus_factor(op, n)


def ops(lib, n: int):
    """Each op keeps the shard's shape, so K of them chain."""
    shift = [(i, (i + 1) % n) for i in range(n)]
    return {
        "scatter+gather": lambda v: lib.all_gather(
            lib.psum_scatter(v, "i", tiled=True), "i", tiled=True
        ),
        # Its block written back into the buffer in place (a tile would cost more memory
        # traffic than the reduce-scatter itself).
        "reduce_scatter": lambda v: v.at[: v.shape[0] // n].set(
            lib.psum_scatter(v, "i", tiled=True) / n
        ),
        "all_gather": lambda v: lib.all_gather(v[: v.shape[0] // n], "i", tiled=True),
        "ppermute": lambda v: lib.ppermute(v, "i", shift),
        "all_to_all": lambda v: lib.all_to_all(v, "i", 0, 0, tiled=True),
    }


def chained(mesh, op, k: int):
    import jax
    from jax.sharding import PartitionSpec as P

    def body(v):
        return jax.lax.fori_loop(0, k, lambda _, u: op(u), v)

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i")))


def local(array) -> np.ndarray:
    """This process's shards, by device id, stacked."""
    shards = sorted(array.addressable_shards, key=lambda s: s.device.id)
    return np.concatenate([np.asarray(s.data) for s in shards])


def variants(names, a2a_schedules) -> list[tuple[str, str]]:
    """(op, schedule) to time: each op once ("auto"), the all-to-all once per schedule."""
    return [
        (name, schedule)
        for name in names
        for schedule in (a2a_schedules if name == "all_to_all" else ("auto",))
    ]


def compiled(fn, x, schedule: str):
    """`fn` compiled for `x`, with JAX_ACCL_ALGORITHM=`schedule` unless "auto" (jax_accl
    reads it when it traces its calls, and config.knob_set clears JAX's caches so that
    nothing traced under another schedule is reused; "auto" leaves the environment as
    it is)."""
    from jax_accl import config

    if schedule == "auto":
        return fn.lower(x).compile()
    with config.knob_set("JAX_ACCL_ALGORITHM", schedule):
        return fn.lower(x).compile()


def measure(
    sizes: list[int], reps: int, on_size=None, names=OPS, a2a_schedules=("auto",)
) -> list[dict]:
    """Rows {op, schedule, size_bytes, lax_s, accl_s} over a mesh "i" of every device of
    the job."""
    import jax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import jax_accl
    from jax_accl.bench.timing import barrier, call_seconds, cpu_seconds

    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    n = len(devices)
    mesh = Mesh(np.array(devices), ("i",))
    rows = []
    for size in sizes:
        if on_size:
            on_size(size)
        shard_rows = max(n, size // 4 // 16 // n * n)
        whole = np.arange(n * shard_rows * 16, dtype=np.float32).reshape(n * shard_rows, 16) % 251
        x = jax.make_array_from_callback(
            whole.shape, NamedSharding(mesh, P("i")), lambda idx, w=whole: w[idx]
        )
        for name, schedule in variants(names, a2a_schedules):
            k = max(2, min(50, (64 << 20) // max(size, 1)))
            fns = {
                lib: tuple(
                    compiled(chained(mesh, ops(mod, n)[name], m), x, schedule) for m in (k, 2 * k)
                )
                for lib, mod in (("lax", jax.lax), ("accl", jax_accl))
            }
            got, want = (local(fns[lib][0](x)) for lib in ("accl", "lax"))
            np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=f"{name} at {human(size)}")
            for fn in (f for pair in fns.values() for f in pair):  # compile, warm up
                call_seconds(fn, x)
            times = {lib: [] for lib in fns}
            longs = {lib: [] for lib in fns}
            cpu = {lib: [] for lib in fns}  # CPU seconds per op of each K-op chain
            for _ in range(reps):
                for lib, (short, long) in fns.items():
                    barrier("jax_accl.bench.collectives")
                    longs[lib].append(call_seconds(long, x))
                    barrier("jax_accl.bench.collectives")
                    before = cpu_seconds()
                    times[lib].append((longs[lib][-1] - call_seconds(short, x)) / k)
                    cpu[lib].append((cpu_seconds() - before) / k)
            per_op = {lib: per_op_seconds(times[lib], longs[lib], k) for lib in fns}
            rows.append(
                {
                    "op": name,
                    "schedule": schedule,
                    "size_bytes": size,
                    "lax_s": per_op["lax"],
                    "accl_s": per_op["accl"],
                    "lax_cpu_s": statistics.median(cpu["lax"]),
                    "accl_cpu_s": statistics.median(cpu["accl"]),
                }
            )
    return rows


def per_op_seconds(differences: list, longs: list, k: int) -> float:
    """The median of the (2K - K) / K differences; where noise (a busy machine, few reps)
    makes it non-positive, the 2K chain's median per op instead, dispatch included (an
    upper bound)."""
    per_op = statistics.median(differences)
    return per_op if per_op > 0 else statistics.median(longs) / (2 * k)


def network_limit_s(row, hosts: int, rails: int, rate: float, per_host: int) -> float:
    """The planner's network limit (jax_accl.plan.collectives) for S bytes per device at
    `rate` bytes/s per rail, `per_host` devices a host; scatter+gather twice a
    reduce-scatter's."""
    op, size = row["op"], row["size_bytes"]
    if op == "scatter+gather":
        return 2 * planned.network_limit_s("reduce_scatter", hosts, rails, size, 1 / rate)
    return planned.network_limit_s(op, hosts, rails, size, 1 / rate, per_host)


def memory_limit_s(row, n: int, bandwidth: float) -> float:
    """The bytes all n devices of a host must read and write at least, at `bandwidth`
    (read + write counted, as a copy's): a reduce-scatter reads the buffer S and writes
    a block, an all-gather and a permutation read S and write S."""
    per_device = {
        "scatter+gather": (1 + 1 / n) + 2,
        "reduce_scatter": 1 + 1 / n,
        "all_gather": 2,
        "ppermute": 2,
        "all_to_all": 2,
    }[row["op"]]
    return per_device * n * row["size_bytes"] / bandwidth


def print_rows(rows, n: int, label: str, limit=None) -> None:
    print(f"# {label}, float32; per op (2K - K ops) / K, median")
    head = ("collective", "size", "jax.lax us", "jax_accl us", "busbw GB/s", "speedup")
    extra = ("limit us", "vs limit") if limit else ()
    extra += ("CPU us accl", "CPU us lax") if rows and "accl_cpu_s" in rows[0] else ()
    print(
        "# {:<14} {:>6} {:>11} {:>12} {:>11} {:>8}".format(*head)
        + "".join(f" {h:>10}" for h in extra)
    )
    for r in rows:
        busbw = r["size_bytes"] / r["accl_s"] * bus_factor(r["op"], n) / 1e9
        op = r["op"] if r.get("schedule", "auto") == "auto" else f"{r['op']}:{r['schedule']}"
        line = (
            f"  {op:<14} {human(r['size_bytes']):>6} {r['lax_s'] * 1e6:>11.1f} "
            f"{r['accl_s'] * 1e6:>12.1f} {busbw:>11.3f} {r['lax_s'] / r['accl_s']:>7.2f}x"
        )
        if limit:
            t = limit(r)
            line += f" {t * 1e6:>10.1f} {r['accl_s'] / t:>9.2f}x"
        if "accl_cpu_s" in r:
            line += f" {r['accl_cpu_s'] * 1e6:>10.1f} {r['lax_cpu_s'] * 1e6:>10.1f}"
        print(line, flush=True)


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m jax_accl.bench.collectives", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--devices", type=int, default=0, help="devices per process")
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--hosts", type=int, default=1, help="namespaced hosts (root)")
    parser.add_argument("--rails", type=int, default=2, help="rails per namespaced host")
    parser.add_argument("--rate-mbit", type=float, default=300.0, help="tc rate of each rail")
    parser.add_argument("--sizes", default="")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", default="", help="append the rows as JSON lines here")
    parser.add_argument("--ops", default=",".join(OPS), help="of: " + ", ".join(OPS))
    parser.add_argument(
        "--a2a-schedules",
        default="auto",
        help="the all-to-all's schedules to time, of direct, hierarchical (by host), auto",
    )
    parser.add_argument("--process-id", type=int, default=-1, help=argparse.SUPPRESS)
    parser.add_argument("--num-processes", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--coordinator", default="", help=argparse.SUPPRESS)
    parser.add_argument("--gloo-interface", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for option, value, allowed in (
        ("--ops", args.ops, OPS),
        ("--a2a-schedules", args.a2a_schedules, ("direct", "hierarchical", "auto")),
    ):
        unknown = set(value.split(",")) - set(allowed)
        if unknown:
            parser.error(f"{option}: unknown {sorted(unknown)}; of {', '.join(allowed)}")
    if args.hosts > 1:
        args.processes = max(args.processes, args.hosts)
        if args.processes % args.hosts:
            parser.error("--processes must be a multiple of --hosts")
    args.devices = args.devices or (8 if args.processes == 1 else max(1, 8 // args.processes))
    args.sizes = args.sizes or ("64KiB,1MiB,16MiB" if args.hosts == 1 else "256KiB,4MiB")
    return args


def worker_main(args) -> int:
    import jax

    from jax_accl.testing import launch

    launch.join_job(
        args.devices, args.coordinator, args.num_processes, args.process_id, args.gloo_interface
    )
    rows = measure(
        [parse_size(s) for s in args.sizes.split(",")],
        args.reps,
        names=args.ops.split(","),
        a2a_schedules=args.a2a_schedules.split(","),
    )
    print("RESULT " + json.dumps({"rows": rows}), flush=True)
    jax.distributed.shutdown()
    return 0


def launch_main(args) -> tuple[list[dict], str, object]:
    """Runs the job; returns process 0's rows, the label and the limit (or None)."""
    from jax_accl.bench import wire
    from jax_accl.testing import launch, netns

    forwarded = ["-m", "jax_accl.bench.collectives"]
    extra = ["--sizes", args.sizes, "--reps", str(args.reps), "--ops", args.ops]
    extra += ["--a2a-schedules", args.a2a_schedules]
    if args.hosts <= 1:
        results = launch.run_job(forwarded, args.processes, args.devices, extra=extra, timeout=1800)
        label = f"{args.processes} processes x {args.devices} devices, one host (jax.lax: gloo)"
        return cpu_summed(results), label, None
    rails = ",".join(f"rail{r}" for r in range(args.rails))
    per_host = args.processes // args.hosts
    with netns.virtual_hosts(args.hosts, args.rails, rate_mbit=args.rate_mbit or None) as names:
        wire_rates = {} if args.rate_mbit else wire.measure_rails(names, args.rails)
        spaces = [name for name in names for _ in range(per_host)]
        # Shaped, the jobs are told the wire (every rail at that rate): a stored
        # calibration of another wire is not theirs.
        env = [netns.stated_wire(args.rate_mbit)] * len(spaces)
        results = launch.run_on_namespaced_hosts(
            forwarded, spaces, args.devices, rails, extra=extra, env=env, timeout=1800
        )
    speed = f"at {args.rate_mbit:g} Mbit/s" if args.rate_mbit else "unshaped"
    label = (
        f"{args.hosts} namespaced hosts x {per_host} processes x {args.devices} devices, "
        f"{args.rails} rails {speed} (jax.lax: gloo on rail0)"
    )
    devices_per_host = per_host * args.devices
    if args.rate_mbit:  # every rail at the shaped rate
        rails_used, rate = args.rails, args.rate_mbit * 1e6 / 8
    else:  # what the wire test measured each way on every rail at once
        rails_used, rate = 1, list(wire_rates.values())[-1]
        label += f"; the wire each way at once: {wire.describe(wire_rates)}"
    limit = lambda r: network_limit_s(r, args.hosts, rails_used, rate, devices_per_host)  # noqa: E731
    return cpu_summed(results), label, limit


def cpu_summed(results: list[dict]) -> list[dict]:
    """Process 0's rows, each with its CPU seconds per op summed over every process."""
    rows = results[0]["rows"]
    for i, row in enumerate(rows):
        for key in ("lax_cpu_s", "accl_cpu_s"):
            row[key] = sum(result["rows"][i][key] for result in results)
    return rows


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.process_id >= 0:
        return worker_main(args)
    from jax_accl.bench import memory

    n = args.processes * args.devices
    before = memory.copy_bandwidths() if args.hosts <= 1 else None
    if args.processes > 1:
        rows, label, limit = launch_main(args)
    else:
        import jax

        jax.config.update("jax_num_cpu_devices", args.devices)
        rows = measure(
            [parse_size(s) for s in args.sizes.split(",")],
            args.reps,
            names=args.ops.split(","),
            a2a_schedules=args.a2a_schedules.split(","),
        )
        label, limit = f"{n} CPU devices in one process", None
    if before is not None:  # one host: the memory's limit, at the best bandwidth seen
        bandwidth = memory.fastest(before, memory.copy_bandwidths())["copy"]
        label += f"; memory limit at B = {bandwidth / 1e9:.1f} GB/s"
        limit = lambda r: memory_limit_s(r, n, bandwidth)  # noqa: E731
    print_rows(rows, n, label, limit)
    if args.json:
        with open(args.json, "a") as f:
            for r in rows:
                f.write(json.dumps({**r, "label": label}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
