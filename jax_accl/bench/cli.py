"""`python -m jax_accl.bench`: the command line, and the jobs it launches (one process,
several processes of one host, or processes on namespaced hosts)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess

import jax_accl.bench as package
from jax_accl import cost_model
from jax_accl import rails as rails_lib
from jax_accl.bench import (
    calibrate,
    calibrate_wire,
    iperf,
    memory,
    mpi,
    overlap,
    profiler_cost,
    report,
    scaling,
    steps,
    sweep,
    wire,
)
from jax_accl.bench.progress import Progress, report_piece, weight
from jax_accl.bench.timing import JOB_TIMEOUT_S
from jax_accl.testing import launch, netns
from jax_accl.units import human, parse_size


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m jax_accl.bench", description=package.__doc__.split("\n\n")[0]
    )
    parser.add_argument("--sizes", default="4KiB,64KiB,1MiB,4MiB,16MiB,64MiB")
    parser.add_argument("--devices", type=int, default=8, help="devices per process")
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="run as this many processes (jax.distributed; baseline: gloo psum)",
    )
    parser.add_argument(
        "--hosts",
        default="1",
        help="spread the processes over this many network-namespace hosts (root); several "
        "counts (2,4,8,16): weak scaling, one job per count, --processes-per-host processes "
        "on each host, busbw per host against hosts with the planner's prediction",
    )
    parser.add_argument(
        "--processes-per-host",
        default="",
        help="with --hosts: processes on each host, one number for all or one "
        "per host (e.g. 2,1); sets --processes",
    )
    parser.add_argument("--rails", type=int, default=2, help="rails per namespaced host")
    parser.add_argument(
        "--rate-mbit",
        type=float,
        default=300.0,
        help="tc rate of every namespaced rail (0: unshaped)",
    )
    parser.add_argument(
        "--flow-cap-mbit",
        type=float,
        default=0.0,
        help="with --hosts and --rate-mbit: each TCP flow gets at most this much of a "
        "rail (a cloud's per-flow cap: an htb class per flow, jax_accl.testing.netns)",
    )
    parser.add_argument(
        "--flow-classes",
        type=int,
        default=0,
        help="with --flow-cap-mbit: the classes flows hash onto (0: 1024; few: flows "
        "collide, two sharing one cap)",
    )
    parser.add_argument(
        "--mtu", type=int, default=1500, help="MTU of every namespaced rail (9000: jumbo frames)"
    )
    parser.add_argument(
        "--wire-seconds",
        type=float,
        default=2.0,
        help="with --hosts unshaped: seconds of the wire's own bidirectional TCP test per "
        "rail and on all rails at once, before each job (0: skip it)",
    )
    parser.add_argument(
        "--all-rails-only", action="store_true", help="with --hosts: skip the run on one rail"
    )
    parser.add_argument(
        "--pipeline-chunks",
        default="",
        help="with --hosts: one job per JAX_ACCL_PIPELINE_CHUNKS value, e.g. "
        "1,0 (off, then the cost model's choice)",
    )
    parser.add_argument(
        "--algorithms",
        default="auto,direct,ring,halving_doubling",
        help="jax_accl's variants; a name+bf16 (e.g. auto+bf16) sends float32 as bfloat16",
    )
    parser.add_argument("--loop", type=int, default=0, help="chained ops per call (0: by size)")
    parser.add_argument(
        "--reps",
        type=int,
        default=None,
        help="repetitions per variant and size (median): 5, for --calibrate 9",
    )
    parser.add_argument("--json", default="", help="append JSON lines here")
    parser.add_argument("--plot", default="", help="write a PNG of busbw against size here")
    parser.add_argument(
        "--calibrate",
        action="store_true",
        help="measure this machine's cost-model constants (in one process on "
        "--devices devices, then across --processes processes, 2 by "
        "default) and store them; with --hosts 2: the wire between two namespaced "
        "hosts with --rails rails (--rate-mbit 0: unshaped)",
    )
    parser.add_argument(
        "--profiler-cost",
        action="store_true",
        help="time a 4KiB all-reduce before any profiling session, after one and inside one",
    )
    parser.add_argument(
        "--overlap",
        action="store_true",
        help="per size: the all-reduce alone, independent compute alone, both in one "
        "program, and the share of the shorter one hidden (jax_accl and jax.lax)",
    )
    parser.add_argument(
        "--steps",
        action="store_true",
        help="with --hosts: instead of the sweep, where each algorithm's time between hosts "
        "goes, step by step (process 0's native events of a few calls per size)",
    )
    parser.add_argument(
        "--mpi",
        choices=("auto", "on", "off"),
        default="auto",
        help="across processes (on one host or --hosts): also time mpi4jax over Open MPI "
        "(auto: where installed, see scripts/install_mpi.sh; on: an error before measuring "
        "where it is not; MPIRUN: the mpirun to use)",
    )
    parser.add_argument(
        "--peer-congestion",
        default="system",
        help="with --hosts: the TCP congestion control of the baselines' connections (gloo's, "
        "MPI's), set as each namespaced host's default (net.ipv4.tcp_congestion_control; "
        "system: the kernel's own, e.g. bbr or cubic; reno: jax_accl's default, "
        "JAX_ACCL_TCP_CONGESTION); jax_accl's connections set their own either way",
    )
    parser.add_argument(
        "--pytree",
        type=int,
        default=0,
        help="also time psum of a pytree of this many leaves (fusion)",
    )
    # Set by the launcher for the processes of a multi-process run.
    parser.add_argument("--process-id", type=int, default=-1, help=argparse.SUPPRESS)
    parser.add_argument("--num-processes", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--coordinator", default="", help=argparse.SUPPRESS)
    parser.add_argument("--gloo-interface", default="", help=argparse.SUPPRESS)
    parser.add_argument("--label", default="", help=argparse.SUPPRESS)
    parser.add_argument("--wire-points", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        args.host_counts = [int(h) for h in str(args.hosts).split(",")]
    except ValueError:
        parser.error(f"--hosts: a count or counts separated by commas, not {args.hosts!r}")
    if min(args.host_counts) < 1:
        parser.error("--hosts: every count must be >= 1")
    if len(args.host_counts) > 1 and ("," in args.processes_per_host or min(args.host_counts) < 2):
        parser.error("--hosts with several counts: each >= 2, one --processes-per-host for all")
    args.hosts = args.host_counts[0]
    if args.peer_congestion != "system" and args.hosts < 2:
        parser.error("--peer-congestion: with --hosts 2 or more (namespaced hosts) only")
    return args


def worker_main(args) -> int:
    """One process of a multi-process run: measure over the global mesh; process 0 reports."""
    import jax

    launch.join_job(
        args.devices, args.coordinator, args.num_processes, args.process_id, args.gloo_interface
    )
    n = args.devices * args.num_processes
    import jax_accl

    # Process 0 tells the launcher which size starts (the progress line).
    on_size = (lambda size: report_piece(size=size)) if args.process_id == 0 else None
    if args.calibrate and args.wire_points:
        result = {"points": calibrate_wire.wire_points(args.reps, on_size)}
    elif args.calibrate:
        result = {"points": calibrate.calibration_points(n, args.reps, on_size)}
    elif args.steps:
        algorithms = [a for a in args.algorithms.split(",") if a]
        result = {
            "steps": [
                s
                for size in sizes_of(args)
                for s in steps.measure(size, n, args.hosts, algorithms, args.reps)
            ]
        }
    elif args.overlap:
        result = {"overlap": [r for s in sizes_of(args) for r in overlap.measure(s, n, args.reps)]}
    else:
        result = {"rows": sweep.run_sweep(args, n, args.label, on_size), "stats": jax_accl.stats()}
    print("RESULT " + json.dumps(result), flush=True)
    jax.distributed.shutdown()
    return 0


def processes_per_host(args) -> list[int]:
    """Processes on each of the --hosts hosts, from --processes-per-host or --processes."""
    if args.processes_per_host:
        counts = [int(c) for c in args.processes_per_host.split(",")]
        counts = counts * args.hosts if len(counts) == 1 else counts
        if len(counts) != args.hosts or min(counts) < 1:
            raise SystemExit("--processes-per-host: one count >= 1, or one per host")
        return counts
    if args.processes % args.hosts:
        raise SystemExit("--processes must be a multiple of --hosts")
    return [args.processes // args.hosts] * args.hosts


def sizes_of(args) -> list[int]:
    return [parse_size(s) for s in args.sizes.split(",")]


def worker_args(args) -> list[str]:
    """The sweep's options, as every process of a multi-process run gets them."""
    return [
        *(["--overlap"] if args.overlap else []),
        *(["--steps", "--hosts", str(args.hosts)] if args.steps else []),
        "--sizes",
        args.sizes,
        "--algorithms",
        args.algorithms,
        "--reps",
        str(args.reps),
        "--loop",
        str(args.loop),
    ]


def multi_process_main(args, out) -> int:
    """Launch the processes (on namespaced hosts if --hosts > 1) and print their table."""
    forwarded = worker_args(args)
    worker = ["-m", "jax_accl.bench"]
    if args.hosts <= 1:
        label = f"{args.processes}x{args.devices} processes x devices, one host"
        sizes = [weight(s) for s in sizes_of(args)]
        progress = Progress("jax_accl.bench", sizes + [sum(sizes) / 4])  # and MPI's
        before = memory.copy_bandwidths()
        results = launch.run_job(
            worker,
            args.processes,
            args.devices,
            extra=forwarded + ["--label", label],
            timeout=JOB_TIMEOUT_S,
            on_progress=lambda piece: progress.begin(f"{label}: {human(piece['size'])}"),
        )
        if args.overlap:
            progress.finish()
            overlap.print_rows([r for res in results for r in res["overlap"]], label, out)
            return 0
        rows = report.job_rows(results)
        progress.begin("the MPI baseline")
        mpi_lines = mpi.add_mpi_rows(rows, args, label)
        progress.finish()
        # B measured here, alone, before and after the workers ran.
        bandwidths = memory.fastest(before, memory.copy_bandwidths())
        memory.add_memory_limits(rows, bandwidths)
        print(
            f"# {label}; baseline: jax.lax.psum over gloo; {memory.describe_bandwidths(bandwidths)}"
        )
        report.print_rows(rows, memory.MEMORY_LIMITS, out)
        for line in mpi_lines:
            print("#", line)
        if args.plot:
            report.plot(rows, args.plot, label)
        return 0
    if len(args.host_counts) > 1:
        return weak_scaling_main(args, out)
    per_host = processes_per_host(args)
    rate = args.rate_mbit * 1e6 / 8
    rail_counts = [args.rails] if args.all_rails_only else sorted({1, args.rails})
    pipelines = [c for c in args.pipeline_chunks.split(",") if c] or [None]
    jobs = [(rails, chunks) for rails in rail_counts for chunks in pipelines]
    sizes = [weight(s) for s in sizes_of(args)]
    with_mpi = [sum(sizes) / 4] if mpi.will_run(args) and not (args.overlap or args.steps) else []
    progress = Progress("jax_accl.bench", [w for _ in jobs for w in sizes + with_mpi])
    for rails, chunks in jobs:
        multi_host_job(args, per_host, rails, rate, chunks, out, progress)
    progress.finish()
    return 0


def weak_scaling_main(args, out) -> int:
    """One job per count of --hosts (all rails, --processes-per-host x --devices on each
    host), then the scaling table (and --plot: busbw per host against hosts). A job that
    fails (a process killed for memory at 16 hosts, say) is reported and the others'
    points kept; the exit status is then 1."""
    sizes = [weight(s) for s in sizes_of(args)]
    progress = Progress("jax_accl.bench", [w for _ in args.host_counts for w in sizes])
    pts, failed = [], []
    plot_path, args.plot = args.plot, ""  # the jobs' own plots: not drawn
    for hosts in args.host_counts:
        args.hosts = hosts
        per_host = processes_per_host(args)
        args.processes = sum(per_host)
        rate = args.rate_mbit * 1e6 / 8
        try:
            rows = multi_host_job(args, per_host, args.rails, rate, None, None, progress)
        except RuntimeError as e:
            failed.append(hosts)
            print(f"# {hosts} hosts: the job failed, no points: {str(e).splitlines()[0]}")
            continue
        layout = [[args.devices] * count for count in per_host]
        pts += scaling.points(rows, hosts, layout, args.rails, args.rate_mbit, args.mtu)
    progress.finish()
    scaling.print_points(pts, out)
    if plot_path:
        shape = f"{args.processes_per_host or 1} process(es) x {args.devices} device(s) per host"
        speed = f"{args.rails} rails at {args.rate_mbit:g} Mbit/s" if args.rate_mbit else "unshaped"
        speed += f", MTU {args.mtu}" if args.mtu != 1500 else ""
        scaling.plot(pts, plot_path, args.rate_mbit, f"weak scaling, {shape}, {speed}")
        print(f"# plot: {plot_path}")
    if failed:
        print(f"# weak scaling: the jobs of {failed} hosts failed (their output is above)")
    return 1 if failed else 0


def multi_host_job(args, per_host, rails, rate, chunks, out, progress):
    """One job on namespaced hosts with `rails` rails in use; prints its table and returns
    its rows (none for --overlap and --steps)."""
    forwarded = worker_args(args)
    with netns.virtual_hosts(
        args.hosts,
        args.rails,
        rate_mbit=args.rate_mbit or None,
        mtu=args.mtu,
        flow_cap_mbit=args.flow_cap_mbit or None,
        flow_classes=args.flow_classes,
    ) as names:
        peers = peer_congestion(names, args.peer_congestion)
        spaces = [name for name, count in zip(names, per_host) for _ in range(count)]
        knobs = {"JAX_ACCL_PIPELINE_CHUNKS": chunks} if chunks is not None else {}
        env = [{**knobs, **netns.stated_wire(args.rate_mbit, args.mtu)}] * len(spaces)
        shape = "+".join(map(str, per_host)) if len(set(per_host)) > 1 else per_host[0]
        speed = f"at {args.rate_mbit:g} Mbit/s" if args.rate_mbit else "unshaped"
        speed += f", {args.flow_cap_mbit:g} Mbit/s per flow" if args.flow_cap_mbit else ""
        speed += f", MTU {args.mtu}" if args.mtu != 1500 else ""
        # Shaped, the job states its wire (netns.stated_wire): a stored one is not used.
        stored = None if args.rate_mbit else cost_model.stored_wire()
        striped = rails_lib.paying_count(rails, stored)
        label = (
            f"{args.hosts} hosts x {shape} processes x {args.devices} devices, "
            f"{rails} of {args.rails} rails {speed}"
            + (f" (striped over {striped}: the stored wire calibration)" if striped < rails else "")
            + (f", pipeline chunks {chunks} (0: the cost model's)" if chunks is not None else "")
        )
        if args.flow_cap_mbit:
            print(f"# {label}: {iperf.describe(iperf.rates(names))}")
        measure_wire = not args.rate_mbit and args.wire_seconds > 0 and not args.overlap
        wire_rates = wire.measure_rails(names, rails, args.wire_seconds) if measure_wire else {}
        results = launch.run_on_namespaced_hosts(
            ["-m", "jax_accl.bench"],
            spaces,
            args.devices,
            ",".join(f"rail{r}" for r in range(rails)),
            extra=forwarded + ["--label", label],
            env=env,
            timeout=JOB_TIMEOUT_S,
            on_progress=lambda piece: progress.begin(f"{label}: {human(piece['size'])}"),
        )
        if args.overlap:
            overlap.print_rows([r for res in results for r in res["overlap"]], label, out)
            return []
        if args.steps:
            print(f"# {label}")
            steps.print_summary(results[0]["steps"], args.hosts, rails * rate)
            return []
        rows = report.job_rows(results)
        if args.flow_cap_mbit:
            sent = netns.flow_class_bytes(names[0], "rail0")
            print(
                f"# host 0's rail0, bytes of each per-flow class that sent ({len(sent)}): "
                + ", ".join(f"{b / 2**20:.0f} MiB" for b in sent[:12])
            )
        if mpi.will_run(args):
            progress.begin(f"{label}: the MPI baseline")
        # As many MPI processes on each host as the job has devices there.
        ranks = [(name, count * args.devices) for name, count in zip(names, per_host)]
        mpi_lines = mpi.add_mpi_rows(rows, args, label, hosts=ranks)
    limits = network_limits(rows, args, rails, rate, wire_rates)
    wire_note = f"; the wire each way at once: {wire.describe(wire_rates)}" if wire_rates else ""
    print(f"# {label}; baseline: jax.lax.psum over gloo on rail0, {peers}{wire_note}")
    report.print_rows(rows, limits, out)
    for line in mpi_lines:
        print("#", line)
    report.print_phases(rows)
    if args.plot:
        stem, ext = os.path.splitext(args.plot)
        report.plot(rows, f"{stem}-{rails}rail{ext or '.png'}", label)
    print(
        "# bytes sent per rail by process 0:",
        {k: v["bytes_sent"] for k, v in results[0]["stats"]["transports"].items()},
    )
    print("# connections per rail and peer:", describe_stripes(results[0]["stats"]))
    return rows


def peer_congestion(names: list[str], choice: str) -> str:
    """Sets the congestion control the baselines' sockets get on every namespaced host
    (each network namespace has its own default; "system" leaves the kernel's) and says
    which it is."""

    def sysctl(name: str, *setting: str) -> subprocess.CompletedProcess:
        command = ["ip", "netns", "exec", name, "sysctl", *setting]
        return subprocess.run(command, capture_output=True, text=True, timeout=30)

    if choice != "system":
        for name in names:
            done = sysctl(name, "-qw", f"net.ipv4.tcp_congestion_control={choice}")
            if done.returncode != 0:
                raise SystemExit(
                    f"--peer-congestion {choice}: the kernel refused it ({done.stderr.strip()}); "
                    "see /proc/sys/net/ipv4/tcp_available_congestion_control"
                )
    shown = sysctl(names[0], "-n", "net.ipv4.tcp_congestion_control").stdout.strip()
    source = "the system's" if choice == "system" else "set by --peer-congestion"
    return f"the baselines' congestion control {shown or '?'} ({source})"


def describe_stripes(stats: dict) -> str:
    """The job's connections per rail and peer, and the probe's rates behind them."""
    choice = stats.get("stripes_per_rail") or {}
    if "one_flow_bytes_per_s" not in choice:
        return f"{choice.get('stripes', 1)} ({choice.get('why', 'one process')})"
    one, many = choice["one_flow_bytes_per_s"], choice["many_flows_bytes_per_s"]
    return (
        f"{choice['stripes']} (process 0's probe: one flow {human_rate(one)}, "
        f"{choice['flows']} at once {human_rate(many)})"
    )


def human_rate(bytes_per_s: float) -> str:
    return f"{bytes_per_s * 8 / 1e6:.0f} Mbit/s"


def network_limits(rows, args, rails: int, rate: float, wire_rates: dict) -> list:
    """The rows' network limits as table columns, each also stored in the rows: every
    host must send and receive 2(H-1)/H of the buffer over its rails at least once, at
    the shaped rate ("vs link"), or unshaped at the rate the wire test measured each way
    on the rails in use ("x wire": every rail at once, or rail0 alone); a +bf16 variant's
    buffer travels as half its bytes."""
    h = args.hosts
    share = 2 * (h - 1) / h
    columns = []
    if args.rate_mbit:
        columns.append(("vs link", "link_limit_s", rails * rate))
    if wire_rates:
        columns.append(("x wire", "wire_limit_s", list(wire_rates.values())[-1]))
    for r in rows:
        r["rails_used"] = rails
        for _, key, bytes_per_s in columns:
            r[key] = share * sweep.wire_bytes(r["variant"], r["size_bytes"]) / bytes_per_s
    return [(name, lambda r, key=key: r[key]) for name, key, _ in columns]


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.reps is None:
        args.reps = 9 if args.calibrate else 5
    if args.process_id >= 0:
        return worker_main(args)
    # The launcher ends its workers on any signal that ends it.
    with launch.ended_by_signals():
        return launcher_main(args)


def check_needs(args) -> None:
    """What the run needs, checked before anything is measured: --mpi on needs MPI."""
    if args.mpi == "on" and mpi.missing():
        raise SystemExit(
            f"python -m jax_accl.bench: --mpi on: {mpi.missing()}; install it with "
            "`bash scripts/install_mpi.sh`, or run with --mpi auto (where installed) or off"
        )


def launcher_main(args) -> int:
    """`python -m jax_accl.bench` itself (not a worker it started), `args` parsed."""
    check_needs(args)
    if args.calibrate and args.hosts > 1:
        return calibrate_wire.main(args)
    if args.calibrate:
        return calibrate.main(args)
    if args.profiler_cost:
        return profiler_cost.main(args)
    out = open(args.json, "a") if args.json else None
    try:
        if args.processes_per_host:
            args.processes = sum(processes_per_host(args))
        if args.processes > 1:
            return multi_process_main(args, out)
        import jax

        jax.config.update("jax_num_cpu_devices", args.devices)
        n = args.devices
        sizes = sizes_of(args)
        if args.overlap:
            rows = [r for s in sizes for r in overlap.measure(s, n, args.reps)]
            overlap.print_rows(rows, f"1x{n} in-process", out)
            return 0
        progress = Progress("jax_accl.bench", [weight(s) for s in sizes])
        before = memory.copy_bandwidths()
        rows = sweep.run_sweep(
            args, n, f"1x{n} in-process", lambda size: progress.begin(f"{n} devices: {human(size)}")
        )
        progress.finish()
        bandwidths = memory.fastest(before, memory.copy_bandwidths())
        print(
            f"# {n} CPU devices, float32 sum, {memory.describe_bandwidths(bandwidths)} (the faster "
            f"of before and after the sweep); times are medians of {args.reps} runs, per op "
            f"in a fori_loop"
        )
        memory.add_memory_limits(rows, bandwidths)
        report.print_rows(rows, memory.MEMORY_LIMITS, out)
        if args.plot:
            report.plot(rows, args.plot, f"all-reduce, {n} CPU devices in one process")
            print(f"# plot: {args.plot}")
        if args.pytree:
            nbytes, results = sweep.measure_pytree(n, args.pytree, args.reps)
            base = results["jax.lax.psum leaf by leaf"]
            print(f"\n# pytree of {args.pytree} leaves, {human(nbytes)} per device, one call each")
            for name, t in results.items():
                print(f"{name:>28} {t * 1e3:9.2f} ms  {base / t:5.2f}x vs psum")
                if out:
                    out.write(
                        json.dumps(
                            dict(
                                pytree_leaves=args.pytree,
                                bytes=nbytes,
                                variant=name,
                                seconds=t,
                                speedup_vs_psum=base / t,
                            )
                        )
                        + "\n"
                    )
        return 0
    finally:
        if out:
            out.close()
