"""All-reduce benchmark in the nccl-tests convention, jax_accl against jax.lax.psum.

    python -m jax_accl.bench [--sizes 4KiB,1MiB,16MiB] [--devices 8] [--json out.jsonl]

For every size it times, in the same run, K and 2K all-reduces chained in one jitted
lax.fori_loop, each feeding the next and nothing else in the loop; the difference over
K is the time of one all-reduce with everything paid once per call (dispatch, the copy
of the argument into the loop, page faults of fresh buffers) cancelled out. That for
jax.lax.psum and for jax_accl with each algorithm, the repetitions going round the
variants so that the machine's slow spells hit all alike; it reports time per op, algbw = S/t
and busbw = algbw·2(n-1)/n, the ratio to psum and the memory limit t_min = 2·n·S/B
(B: copy bandwidths measured here, NumPy's and a non-temporal one, both on every core).
Every row checks its result against NumPy.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time

import numpy as np


def parse_size(text: str) -> int:
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "B": 1}
    for unit, scale in units.items():
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * scale)
    return int(text)


def human(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g}{unit}"
    return f"{nbytes}B"


def copy_bandwidths(nbytes: int = 64 << 20, reps: int = 7) -> dict:
    """Bytes per second moved by large copies on every core at once (each core copies its
    own `nbytes` array; read + write counted once each), the best of `reps`:
    "copy", NumPy's copy (the issue's B), and "stream", a copy with non-temporal stores,
    which skips reading the destination first (the stricter limit)."""
    import threading

    from jax_accl import _accl
    cores = os.cpu_count() or 1
    pairs = [(np.empty(nbytes // 8), np.ones(nbytes // 8)) for _ in range(cores)]
    for dst, src in pairs:
        np.copyto(dst, src)  # fault the pages in
    copies = {"copy": lambda dst, src: np.copyto(dst, src),
              "stream": lambda dst, src: _accl.stream_copy(dst.ctypes.data, src.ctypes.data,
                                                           nbytes)}
    best = {}
    for _ in range(reps):
        for kind, copy in copies.items():
            threads = [threading.Thread(target=copy, args=pair) for pair in pairs]
            start = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            best[kind] = min(best.get(kind, float("inf")), time.perf_counter() - start)
    return {kind: 2 * nbytes * cores / seconds for kind, seconds in best.items()}


def fastest(*measurements: dict) -> dict:
    """Per kind, the highest of several copy_bandwidths() results: the machine's memory
    speed drifts by up to 2x within minutes here, and the limit must be the strict one."""
    return {kind: max(m[kind] for m in measurements) for kind in measurements[0]}


def add_memory_limits(rows: list[dict], bandwidths: dict) -> None:
    """t_min = 2·n·S/B for both copy bandwidths."""
    for r in rows:
        r["memory_limit_s"] = 2 * r["devices"] * r["size_bytes"] / bandwidths["copy"]
        r["memory_limit_stream_s"] = 2 * r["devices"] * r["size_bytes"] / bandwidths["stream"]


def describe_bandwidths(bandwidths: dict) -> str:
    return (f"copy bandwidth B = {bandwidths['copy'] / 1e9:.1f} GB/s (NumPy copy, all cores), "
            f"{bandwidths['stream'] / 1e9:.1f} GB/s (non-temporal copy)")


MEMORY_LIMITS = [("copy", lambda r: r["memory_limit_s"]),
                 ("NT copy", lambda r: r["memory_limit_stream_s"])]


def _seconds(fn, arg) -> float:
    import jax
    start = time.perf_counter()
    jax.block_until_ready(fn(arg))
    return time.perf_counter() - start


def _timed(fn, arg, reps: int) -> float:
    _seconds(fn, arg)  # compile and warm up
    return statistics.median(_seconds(fn, arg) for _ in range(reps))


def warm_up_calls(size_bytes: int, loop: int) -> int:
    """(short, long) pairs to run before timing: about 1,500 all-reduces for small sizes
    and 512 MiB of them for large ones. The first thousand or so calls of a process run
    up to 2x slower (8 processes x 1 device, 4 KiB: 377 us per op in the first 1,200,
    about 200 us afterwards), so the variant timed first would lose. A count, not a
    time: every process of a job must run the same number of collectives."""
    ops = min(1500, max(3 * loop, (512 << 20) // max(size_bytes, 1)))
    return max(1, math.ceil(ops / (3 * loop)))


def per_op_interleaved(chains: dict, arg, loop: int, reps: int, size_bytes: int) -> dict:
    """Seconds per all-reduce of every variant {name: (short, long)}: the median of (time
    of `long` - time of `short`) / loop, where `long` chains 2·loop all-reduces and
    `short` loop. After a warm-up of each, the repetitions go round the variants in a
    new order each round (in a fixed order, the variant after jax.lax.psum's gloo ran
    1.1-1.8x slower than itself elsewhere), so a slow spell of the machine (they last
    seconds here) and whatever a variant leaves behind hit all of them alike. Where the
    noise hides the difference (a median of 5% of `long` / 2·loop or less), that upper
    bound, dispatch included, rather than a zero."""
    for short, long in chains.values():
        for _ in range(warm_up_calls(size_bytes, loop)):  # the first also compiles
            _seconds(short, arg), _seconds(long, arg)
    differences = {name: [] for name in chains}
    longs = {name: [] for name in chains}
    for rep in range(reps):
        order = list(chains)
        random.Random(rep).shuffle(order)  # seeded: every process runs the same order
        for name in order:
            short, long = chains[name]
            longs[name].append(_seconds(long, arg))
            differences[name].append((longs[name][-1] - _seconds(short, arg)) / loop)
    result = {}
    for name in chains:
        difference = statistics.median(differences[name])
        upper_bound = statistics.median(longs[name]) / (2 * loop)
        result[name] = difference if difference > 0.05 * upper_bound else upper_bound
    return result


def chain_length(size_bytes: int, loop: int, n: int) -> int:
    """K, the all-reduces chained per call: --loop, or by size (more for small ones),
    capped so that the chained sums stay finite."""
    loop = loop or max(4, min(50, (256 << 20) // max(size_bytes, 1) // 8))
    return max(1, min(loop, max_chain(n) // 2))


def test_data(size_bytes: int, n: int) -> np.ndarray:
    """n rows of small integers (exact sums in float32), one per device."""
    rng = np.random.default_rng(0)
    return rng.integers(-8, 8, (n, max(1, size_bytes // 4))).astype(np.float32)


def _mesh(n: int):
    """A 1-D mesh over n devices, process by process (all processes' devices)."""
    import jax
    from jax.sharding import Mesh
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))[:n]
    return Mesh(np.array(devices), ("i",))


def _first_local_block(array) -> np.ndarray:
    return np.asarray(min(array.addressable_shards, key=lambda s: s.device.id).data)[0]


# Chained sums multiply the values by n per step; |inputs| <= 8 keeps 8·n^steps finite
# in float32 for this many steps (n = 8; more for smaller groups).
def max_chain(n: int) -> int:
    return int(math.log(3e38 / 8) / math.log(max(n, 2)))


def measure(size_bytes: int, n: int, algorithms, loop: int, reps: int, baseline: bool = True):
    """[(variant, seconds per all-reduce)], {variant: seconds of one call}, {variant: the
    algorithm it ran}, {variant: seconds per call in each phase of the hierarchy}: per op is (time of 2K chained ops - time of K) / K, with K = loop.
    The variants: jax.lax.psum (unless not `baseline`), then jax_accl with each algorithm."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import jax_accl

    mesh = _mesh(n)
    host = test_data(size_bytes, n)
    x = jax.make_array_from_callback(host.shape, NamedSharding(mesh, P("i")),
                                     lambda index: host[index])
    want = host.sum(0)

    def program(reduce, steps):
        def body(a):
            return jax.lax.fori_loop(0, steps, lambda _, v: reduce(v), a)
        return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"),
                                     check_vma=False))

    single, ran, chains, phases = {}, {}, {}, {}
    variants = [("jax.lax.psum", lambda v: jax.lax.psum(v, "i"))][:int(baseline)] + [
        (f"accl:{alg}", (lambda a: lambda v: jax_accl.allreduce(v, "i", algorithm=a))(alg))
        for alg in algorithms]
    for name, reduce in variants:
        once = jax.jit(jax.shard_map(reduce, mesh=mesh, in_specs=P("i"), out_specs=P("i"),
                                     check_vma=False))
        calls_before = _calls_by_algorithm()
        got = _first_local_block(once(x))
        if name.startswith("accl:"):  # what it ran (auto's choice), from the library's counters
            ran[name] = _most_called_since(calls_before)
        if not np.array_equal(got, want):
            raise AssertionError(f"{name} at {human(size_bytes)}: wrong result")
        phases_before = jax_accl.stats()["phase_seconds"]
        single[name] = _timed(once, x, reps)
        if name.startswith("accl:"):  # per call and device thread (reps + the warm-up)
            phases_after = jax_accl.stats()["phase_seconds"]
            calls = (reps + 1) * jax.local_device_count()
            phases[name] = {k: (phases_after[k] - phases_before[k]) / calls for k in phases_after}
        chains[name] = (program(reduce, loop), program(reduce, 2 * loop))
    return list(per_op_interleaved(chains, x, loop, reps, size_bytes).items()), single, ran, phases


def _calls_by_algorithm() -> dict:
    import jax_accl
    return {name: a["calls"] for name, a in jax_accl.stats()["algorithms"].items()}


def _most_called_since(before: dict) -> str:
    """The algorithm this process ran most often since `before` (_calls_by_algorithm)."""
    after = _calls_by_algorithm()
    return max(after, key=lambda name: after[name] - before.get(name, 0))


def measure_pytree(n: int, leaves: int, reps: int):
    """A gradient-like pytree (`leaves` leaves of model-like sizes): leaf-by-leaf
    jax.lax.psum against jax_accl.psum fused into one call, and jax_accl unfused."""

    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import jax_accl

    mesh = _mesh(n)
    shapes = [(256, 256), (256,), (256, 1024), (1024,), (1024, 256), (256,), (16,), ()]
    rng = np.random.default_rng(0)
    tree = [rng.integers(-8, 8, (n,) + shapes[k % len(shapes)]).astype(np.float32)
            for k in range(leaves)]
    specs = [P("i")] * leaves
    args = [jax.make_array_from_callback(t.shape, NamedSharding(mesh, s),
                                         (lambda t: lambda index: t[index])(t))
            for t, s in zip(tree, specs)]
    nbytes = sum(t[0].nbytes for t in tree)

    # The step computes the leaves before reducing them, as a train step computes its
    # gradients (halving is exact here; XLA would fold away x * 1): the all-reduce gets
    # intermediates, as in training, not the jitted function's own arguments.
    def build(reduce):
        def step(t):
            return reduce([x * 0.5 for x in t])
        return jax.jit(jax.shard_map(step, mesh=mesh, in_specs=(specs,), out_specs=specs,
                                     check_vma=False))

    results = {}
    variants = [("jax.lax.psum leaf by leaf", lambda t: [jax.lax.psum(x, "i") for x in t]),
                ("jax_accl.psum fused", lambda t: jax_accl.psum(t, "i")),
                ("jax_accl.psum unfused", lambda t: [jax_accl.psum(x, "i") for x in t])]
    for name, reduce in variants:
        fn = build(reduce)
        got = fn(args)
        for g, t in zip(got, tree):
            if not np.array_equal(_first_local_block(g), t.sum(0) * 0.5):
                raise AssertionError(f"{name}: wrong result")
        results[name] = _timed(fn, args, reps)
    return nbytes, results


def run_sweep(args, n: int, label: str) -> list[dict]:
    """Every size, jax.lax.psum and each algorithm: rows in nccl-tests units."""
    algorithms = [a for a in args.algorithms.split(",") if a]
    rows = []
    for size in (parse_size(s) for s in args.sizes.split(",")):
        timings, single, ran, phases = measure(size, n, algorithms,
                                               chain_length(size, args.loop, n), args.reps)
        base = dict(timings)["jax.lax.psum"]
        rows += [nccl_row(dict(setting=label, size_bytes=size, devices=n, variant=name,
                               seconds_per_op=t, single_call_s=single[name],
                               **({"ran": ran[name]} if name in ran else {}),
                               **({"phase_s": phases[name]} if name in phases else {})), base)
                 for name, t in timings]
    return rows


def nccl_row(row: dict, baseline_seconds: float) -> dict:
    """Adds algbw = S/t, busbw = algbw·2(n-1)/n and the speedup over the baseline."""
    n, t = row["devices"], row["seconds_per_op"]
    algbw = row["size_bytes"] / t / 1e9
    return {**row, "algbw_gbs": algbw, "busbw_gbs": algbw * 2 * (n - 1) / n,
            "speedup_vs_baseline": baseline_seconds / t}


def add_mpi_rows(rows: list[dict], args, label: str) -> list[str]:
    """Runs the MPI baseline (--mpi) with as many processes as the job has devices and
    appends its rows; returns the comment lines comparing jax_accl with it."""
    from jax_accl import bench_mpi
    n = rows[0]["devices"]
    reason = bench_mpi.missing()
    if args.mpi == "off" or (args.mpi == "auto" and reason):
        return [f"MPI baseline not run: {reason or '--mpi off'}"]
    gloo = {r["size_bytes"]: r["seconds_per_op"] for r in rows if r["variant"] == "jax.lax.psum"}
    mpi = {}
    for r in bench_mpi.run(n, args.sizes, args.loop, args.reps):
        rows.append(nccl_row({**r, "setting": label}, gloo[r["size_bytes"]]))
        mpi[r["size_bytes"]] = r["seconds_per_op"]
    rows.sort(key=lambda r: r["size_bytes"])  # stable: each size's rows stay together
    lines = []
    for r in rows:
        if r["variant"] == "accl:auto":
            lines.append(f"{human(r['size_bytes'])}: jax_accl auto is "
                         f"{mpi[r['size_bytes']] / r['seconds_per_op']:.2f}x faster than "
                         f"mpi4jax (Open MPI, {n} processes x 1 device)")
    return lines


def auto_vs_best(rows: list[dict]) -> list[str]:
    """Per size: which algorithm the automatic choice ran, and how far its time is from
    the best forced algorithm's (where both are the same algorithm, the ratio is noise)."""
    lines = []
    for size in sorted({r["size_bytes"] for r in rows}):
        at = {r["variant"]: r["seconds_per_op"] for r in rows if r["size_bytes"] == size}
        forced = {k: v for k, v in at.items() if k.startswith("accl:") and k != "accl:auto"}
        if "accl:auto" in at and forced:
            best = min(forced, key=forced.get)
            chosen = next(r["ran"] for r in rows
                          if r["size_bytes"] == size and r["variant"] == "accl:auto")
            line = (f"{human(size)}: auto ran {chosen}, {at['accl:auto'] / forced[best]:.2f}x "
                    f"the best forced ({best[5:]})")
            if f"accl:{chosen}" in forced and best != f"accl:{chosen}":
                line += f"; {chosen} forced: {forced[f'accl:{chosen}'] / forced[best]:.2f}x"
            lines.append(line)
    return lines


def plot(rows: list[dict], path: str, title: str) -> None:
    """busbw against size, one line per variant (matplotlib)."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install 'jax_accl[bench]'")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for variant in dict.fromkeys(r["variant"] for r in rows):
        mine = [r for r in rows if r["variant"] == variant]
        ax.plot([r["size_bytes"] for r in mine], [r["busbw_gbs"] for r in mine], marker="o",
                label=variant.replace("accl:", "jax_accl "))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("bytes per device")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def print_rows(rows: list[dict], limits, out) -> None:
    """limits: [(name, seconds of row)], one "vs <name>" column each."""
    print(f"{'size':>8} {'variant':>24} {'time/op':>11} {'algbw GB/s':>10} "
          f"{'busbw GB/s':>10} {'vs base':>8} "
          + "".join(f"{'vs ' + name:>11} " for name, _ in limits) + f"{'1-call':>10}")
    for r in rows:
        t = r["seconds_per_op"]
        print(f"{human(r['size_bytes']):>8} {r['variant']:>24} {t * 1e6:>9.1f}us "
              f"{r['algbw_gbs']:>10.3f} {r['busbw_gbs']:>10.3f} {r['speedup_vs_baseline']:>7.2f}x "
              + "".join(f"{t / limit(r):>10.2f}x " for _, limit in limits)
              + f"{r['single_call_s'] * 1e6:>8.0f}us")
        if out:
            out.write(json.dumps(r) + "\n")
    for line in auto_vs_best(rows):
        print("#", line)
    sys.stdout.flush()


# A multi-process run's bound: long, but a hung worker still ends it with everyone's output.
JOB_TIMEOUT_S = 3600.0


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="4KiB,64KiB,1MiB,4MiB,16MiB,64MiB")
    parser.add_argument("--devices", type=int, default=8, help="devices per process")
    parser.add_argument("--processes", type=int, default=1,
                        help="run as this many processes (jax.distributed; baseline: gloo psum)")
    parser.add_argument("--hosts", type=int, default=1,
                        help="spread the processes over this many network-namespace hosts (root)")
    parser.add_argument("--processes-per-host", default="",
                        help="with --hosts: processes on each host, one number for all or one "
                             "per host (e.g. 2,1); sets --processes")
    parser.add_argument("--rails", type=int, default=2, help="rails per namespaced host")
    parser.add_argument("--rate-mbit", type=float, default=300.0,
                        help="tc rate of every namespaced rail (0: unshaped)")
    parser.add_argument("--all-rails-only", action="store_true",
                        help="with --hosts: skip the run on one rail")
    parser.add_argument("--pipeline-chunks", default="",
                        help="with --hosts: one job per JAX_ACCL_PIPELINE_CHUNKS value, e.g. "
                             "1,0 (off, then the cost model's choice)")
    parser.add_argument("--algorithms", default="auto,direct,ring,halving_doubling")
    parser.add_argument("--loop", type=int, default=0, help="chained ops per call (0: by size)")
    parser.add_argument("--reps", type=int, default=None,
                        help="repetitions per variant and size (median): 5, for --calibrate 9")
    parser.add_argument("--json", default="", help="append JSON lines here")
    parser.add_argument("--plot", default="", help="write a PNG of busbw against size here")
    parser.add_argument("--calibrate", action="store_true",
                        help="measure this machine's cost-model constants (in one process on "
                             "--devices devices, then across --processes processes, 2 by "
                             "default) and store them")
    parser.add_argument("--mpi", choices=("auto", "on", "off"), default="auto",
                        help="with --processes on one host: also time mpi4jax over Open MPI "
                             "(auto: where installed, see scripts/install_mpi.sh)")
    parser.add_argument("--pytree", type=int, default=0,
                        help="also time psum of a pytree of this many leaves (fusion)")
    # Set by the launcher for the processes of a multi-process run.
    parser.add_argument("--process-id", type=int, default=-1, help=argparse.SUPPRESS)
    parser.add_argument("--num-processes", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--coordinator", default="", help=argparse.SUPPRESS)
    parser.add_argument("--gloo-interface", default="", help=argparse.SUPPRESS)
    parser.add_argument("--label", default="", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def worker_main(args) -> int:
    """One process of a multi-process run: measure over the global mesh; process 0 reports."""
    import jax
    jax.config.update("jax_num_cpu_devices", args.devices)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=args.coordinator,
                               num_processes=args.num_processes, process_id=args.process_id)
    if args.gloo_interface:
        from jax_accl import _compat
        _compat.use_gloo_on_interface(args.gloo_interface)
    n = args.devices * args.num_processes
    import jax_accl
    if args.calibrate:
        from jax_accl import bench_calibrate
        result = {"points": bench_calibrate.calibration_points(n, args.reps)}
    else:
        result = {"rows": run_sweep(args, n, args.label), "stats": jax_accl.stats()}
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


def print_phases(rows: list[dict]) -> None:
    """Process 0's time per call in each tier of the hierarchy, for jax_accl's auto rows."""
    for r in rows:
        phases = r.get("phase_s")
        if r["variant"] == "accl:auto" and phases and any(phases.values()):
            print(f"# {human(r['size_bytes'])} accl:auto ({r.get('ran', '?')}) per call: "
                  f"local reduce-scatter {phases['local_reduce_scatter'] * 1e3:.2f} ms, "
                  f"between hosts {phases['between_hosts'] * 1e3:.2f} ms, "
                  f"local all-gather {phases['local_all_gather'] * 1e3:.2f} ms")


def worker_args(args) -> list[str]:
    """The sweep's options, as every process of a multi-process run gets them."""
    return ["--sizes", args.sizes, "--algorithms", args.algorithms, "--reps", str(args.reps),
            "--loop", str(args.loop)]


def multi_process_main(args, out) -> int:
    """Launch the processes (on namespaced hosts if --hosts > 1) and print their table."""
    from jax_accl import launch
    forwarded = worker_args(args)
    worker = ["-m", "jax_accl.bench"]
    if args.hosts <= 1:
        label = f"{args.processes}x{args.devices} processes x devices, one host"
        before = copy_bandwidths()
        results = launch.run_job(worker, args.processes, args.devices,
                                 extra=forwarded + ["--label", label], timeout=JOB_TIMEOUT_S)
        rows = results[0]["rows"]
        mpi_lines = add_mpi_rows(rows, args, label)
        # B measured here, alone, before and after the workers ran.
        bandwidths = fastest(before, copy_bandwidths())
        add_memory_limits(rows, bandwidths)
        print(f"# {label}; baseline: jax.lax.psum over gloo; {describe_bandwidths(bandwidths)}")
        print_rows(rows, MEMORY_LIMITS, out)
        for line in mpi_lines:
            print("#", line)
        if args.plot:
            plot(rows, args.plot, label)
        return 0
    per_host = processes_per_host(args)
    rate = args.rate_mbit * 1e6 / 8
    rail_counts = [args.rails] if args.all_rails_only else sorted({1, args.rails})
    pipelines = [c for c in args.pipeline_chunks.split(",") if c] or [None]
    for rails in rail_counts:
        for chunks in pipelines:
            multi_host_job(args, per_host, rails, rate, chunks, out)
    return 0


def multi_host_job(args, per_host, rails, rate, chunks, out) -> None:
    """One job on namespaced hosts with `rails` rails in use; prints its table."""
    from jax_accl import launch, netns
    forwarded = worker_args(args)
    with netns.virtual_hosts(args.hosts, args.rails, rate_mbit=args.rate_mbit or None) as names:
        spaces = [name for name, count in zip(names, per_host) for _ in range(count)]
        env = [{"JAX_ACCL_HOST_ID": ns,
                "JAX_ACCL_RAILS": ",".join(f"rail{r}" for r in range(rails)),
                **({"JAX_ACCL_PIPELINE_CHUNKS": chunks} if chunks is not None else {})}
               for ns in spaces]
        shape = "+".join(map(str, per_host)) if len(set(per_host)) > 1 else per_host[0]
        speed = f"at {args.rate_mbit:g} Mbit/s" if args.rate_mbit else "unshaped"
        label = (f"{args.hosts} hosts x {shape} processes x {args.devices} devices, "
                 f"{rails} of {args.rails} rails {speed}"
                 + (f", pipeline chunks {chunks} (0: the cost model's)" if chunks is not None else ""))
        results = launch.run_job(["-m", "jax_accl.bench"], sum(per_host), args.devices,
                                 extra=forwarded + ["--gloo-interface", "rail0", "--label", label],
                                 env=env, namespaces=spaces, coordinator_ip=netns.rail_ip(0, 0),
                                 timeout=JOB_TIMEOUT_S)
    rows = results[0]["rows"]
    h = args.hosts
    # Every host must send 2(h-1)/h of the buffer over its rails at least once.
    link_limit = lambda r: 2 * (h - 1) / h * r["size_bytes"] / (rails * rate)  # noqa: E731
    for r in rows:
        r["rails_used"] = rails
        if args.rate_mbit:
            r["link_limit_s"] = link_limit(r)
    print(f"# {label}; baseline: jax.lax.psum over gloo on rail0")
    print_rows(rows, [("link", link_limit)] if args.rate_mbit else [], out)
    print_phases(rows)
    if args.plot:
        stem, ext = os.path.splitext(args.plot)
        plot(rows, f"{stem}-{rails}rail{ext or '.png'}", label)
    print("# bytes sent per rail by process 0:",
          {k: v["bytes_sent"] for k, v in results[0]["stats"]["transports"].items()})


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.reps is None:
        args.reps = 9 if args.calibrate else 5
    if args.process_id >= 0:
        return worker_main(args)
    if args.calibrate:
        from jax_accl import bench_calibrate
        return bench_calibrate.main(args)
    out = open(args.json, "a") if args.json else None
    try:
        if args.processes_per_host:
            args.processes = sum(processes_per_host(args))
        if args.processes > 1:
            return multi_process_main(args, out)
        import jax
        jax.config.update("jax_num_cpu_devices", args.devices)
        n = args.devices
        before = copy_bandwidths()
        rows = run_sweep(args, n, f"1x{n} in-process")
        bandwidths = fastest(before, copy_bandwidths())
        print(f"# {n} CPU devices, float32 sum, {describe_bandwidths(bandwidths)} (the faster "
              f"of before and after the sweep); times are medians of {args.reps} runs, per op "
              f"in a fori_loop")
        add_memory_limits(rows, bandwidths)
        print_rows(rows, MEMORY_LIMITS, out)
        if args.plot:
            plot(rows, args.plot, f"all-reduce, {n} CPU devices in one process")
            print(f"# plot: {args.plot}")
        if args.pytree:
            nbytes, results = measure_pytree(n, args.pytree, args.reps)
            base = results["jax.lax.psum leaf by leaf"]
            print(f"\n# pytree of {args.pytree} leaves, {human(nbytes)} per device, one call each")
            for name, t in results.items():
                print(f"{name:>28} {t * 1e3:9.2f} ms  {base / t:5.2f}x vs psum")
                if out:
                    out.write(json.dumps(dict(pytree_leaves=args.pytree, bytes=nbytes,
                                              variant=name, seconds=t,
                                              speedup_vs_psum=base / t)) + "\n")
        return 0
    finally:
        if out:
            out.close()


if __name__ == "__main__":
    sys.exit(main())
