"""All-reduce benchmark in the nccl-tests convention, jax_accl against jax.lax.psum.

    python -m jax_accl.bench [--sizes 4KiB,1MiB,16MiB] [--devices 8] [--json out.jsonl]

For every size it times, in the same run, K all-reduces chained in one jitted
lax.fori_loop (dispatch amortised; the loop's own elementwise epilogue is measured with
the collective removed and subtracted) for jax.lax.psum and for jax_accl with each
algorithm, and reports time per op, algbw = S/t and busbw = algbw·2(n-1)/n, the ratio
to psum and the memory limit t_min = 2·n·S/B (B: copy bandwidth measured here).
Every row checks its result against NumPy.
"""
from __future__ import annotations

import argparse
import json
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


def copy_bandwidth(nbytes: int = 64 << 20, reps: int = 5) -> float:
    """Bytes per second moved by a large memcpy (read + write counted once each)."""
    src = np.ones(nbytes // 8, np.float64)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return 2 * nbytes / best


def _timed(fn, arg, reps: int) -> float:
    import jax
    jax.block_until_ready(fn(arg))  # compile and warm up
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        jax.block_until_ready(fn(arg))
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def measure(size_bytes: int, n: int, algorithms, loop: int, reps: int):
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import jax_accl

    mesh = jax.make_mesh((n,), ("i",), devices=jax.devices()[:n])
    count = max(1, size_bytes // 4)
    rng = np.random.default_rng(0)
    host = rng.integers(-8, 8, (n, count)).astype(np.float32)  # exact sums in float32
    x = jax.device_put(host, NamedSharding(mesh, P("i")))
    want = host.sum(0)

    def program(reduce):
        def body(a):
            # Scale by 1/n each step so values stay bounded; the chain is data-dependent.
            def step(_, v):
                return reduce(v) * (1.0 / n)
            return jax.lax.fori_loop(0, loop, step, a)
        return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"),
                                     check_vma=False))

    single = {}
    rows = []
    epilogue = _timed(program(lambda v: v), x, reps) / loop
    variants = [("jax.lax.psum", lambda v: jax.lax.psum(v, "i"))] + [
        (f"accl:{alg}", (lambda a: lambda v: jax_accl.allreduce(v, "i", algorithm=a))(alg))
        for alg in algorithms]
    for name, reduce in variants:
        once = jax.jit(jax.shard_map(reduce, mesh=mesh, in_specs=P("i"), out_specs=P("i"),
                                     check_vma=False))
        got = np.asarray(once(x))[0]
        if not np.array_equal(got, want):
            raise AssertionError(f"{name} at {human(size_bytes)}: wrong result")
        single[name] = _timed(once, x, reps)
        per_op = max(_timed(program(reduce), x, reps) / loop - epilogue, 1e-9)
        rows.append((name, per_op))
    return rows, single, epilogue


def measure_pytree(n: int, leaves: int, reps: int):
    """A gradient-like pytree (`leaves` leaves of model-like sizes): leaf-by-leaf
    jax.lax.psum against jax_accl.psum fused into one call, and jax_accl unfused."""
    import os

    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import jax_accl

    mesh = jax.make_mesh((n,), ("i",), devices=jax.devices()[:n])
    shapes = [(256, 256), (256,), (256, 1024), (1024,), (1024, 256), (256,), (16,), ()]
    rng = np.random.default_rng(0)
    tree = [rng.integers(-8, 8, (n,) + shapes[k % len(shapes)]).astype(np.float32)
            for k in range(leaves)]
    specs = [P("i")] * leaves
    args = [jax.device_put(t, NamedSharding(mesh, s)) for t, s in zip(tree, specs)]
    nbytes = sum(t[0].nbytes for t in tree)

    def build(reduce):
        return jax.jit(jax.shard_map(reduce, mesh=mesh, in_specs=(specs,), out_specs=specs,
                                     check_vma=False))

    results = {}
    variants = [("jax.lax.psum leaf by leaf", lambda t: [jax.lax.psum(x, "i") for x in t]),
                ("jax_accl.psum fused", lambda t: jax_accl.psum(t, "i")),
                ("jax_accl.psum unfused", lambda t: [jax_accl.psum(x, "i") for x in t])]
    for name, reduce in variants:
        fn = build(reduce)
        got = fn(args)
        for g, t in zip(got, tree):
            if not np.array_equal(np.asarray(g)[0], t.sum(0)):
                raise AssertionError(f"{name}: wrong result")
        results[name] = _timed(fn, args, reps)
    return nbytes, results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="4KiB,64KiB,1MiB,4MiB,16MiB,64MiB")
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--algorithms", default="auto,direct,ring,halving_doubling")
    parser.add_argument("--loop", type=int, default=0, help="chained ops per call (0: by size)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", default="", help="append JSON lines here")
    parser.add_argument("--pytree", type=int, default=0,
                        help="also time psum of a pytree of this many leaves (fusion)")
    args = parser.parse_args(argv)

    import jax
    jax.config.update("jax_num_cpu_devices", args.devices)
    n = args.devices
    algorithms = [a for a in args.algorithms.split(",") if a]
    bandwidth = copy_bandwidth()
    print(f"# {n} CPU devices, float32 sum, copy bandwidth B = {bandwidth / 1e9:.1f} GB/s; "
          f"times are medians of {args.reps} runs, per op in a fori_loop")
    header = (f"{'size':>8} {'variant':>24} {'time/op':>11} {'algbw GB/s':>10} "
              f"{'busbw GB/s':>10} {'vs psum':>8} {'vs limit':>8} {'1-call':>10}")
    print(header)
    out = open(args.json, "a") if args.json else None
    for size in (parse_size(s) for s in args.sizes.split(",")):
        loop = args.loop or max(2, min(50, (64 << 20) // max(size, 1) // 8))
        rows, single, _ = measure(size, n, algorithms, loop, args.reps)
        limit = 2 * n * size / bandwidth
        base = dict(rows)["jax.lax.psum"]
        for name, t in rows:
            algbw = size / t / 1e9
            busbw = algbw * 2 * (n - 1) / n
            print(f"{human(size):>8} {name:>24} {t * 1e6:>9.1f}us {algbw:>10.2f} {busbw:>10.2f} "
                  f"{base / t:>7.2f}x {t / limit:>7.2f}x {single[name] * 1e6:>8.0f}us")
            if out:
                out.write(json.dumps(dict(size_bytes=size, devices=n, variant=name,
                                          seconds_per_op=t, algbw_gbs=algbw, busbw_gbs=busbw,
                                          speedup_vs_psum=base / t, memory_limit_s=limit,
                                          single_call_s=single[name])) + "\n")
        sys.stdout.flush()
    if args.pytree:
        nbytes, results = measure_pytree(n, args.pytree, args.reps)
        base = results["jax.lax.psum leaf by leaf"]
        print(f"\n# pytree of {args.pytree} leaves, {human(nbytes)} per device, one call each")
        for name, t in results.items():
            print(f"{name:>28} {t * 1e3:9.2f} ms  {base / t:5.2f}x vs psum")
            if out:
                out.write(json.dumps(dict(pytree_leaves=args.pytree, bytes=nbytes, variant=name,
                                          seconds=t, speedup_vs_psum=base / t)) + "\n")
    if out:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
