"""``python -m jax_accl.bench.collectives``: jax_accl's psum_scatter, all_gather and
ppermute against jax.lax's in one process of N CPU devices, nccl-tests style.

Per size (the bytes each device holds): K and 2K ops chained in one jitted
lax.fori_loop, the difference over K, the median of `--reps` interleaved runs. The
ops: scatter+gather (psum_scatter then all_gather, tiled: an all-reduce's traffic,
busbw = algbw·2(n-1)/n), all_gather (of a local 1/n slice: busbw = algbw·(n-1)/n) and
ppermute (a shift: each device sends its buffer once, busbw = algbw). Results are
checked against jax.lax's before timing."""

from __future__ import annotations

import argparse
import statistics

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jax_accl.bench.timing import call_seconds
from jax_accl.units import human, parse_size


def ops(lib, n: int):
    """Each op keeps the shard's shape, so K of them chain."""
    shift = [(i, (i + 1) % n) for i in range(n)]
    return {
        "scatter+gather": lambda v: lib.all_gather(
            lib.psum_scatter(v, "i", tiled=True), "i", tiled=True
        ),
        "all_gather": lambda v: lib.all_gather(v[: v.shape[0] // n], "i", tiled=True),
        "ppermute": lambda v: lib.ppermute(v, "i", shift),
    }


def chained(mesh, op, k: int):
    def body(v):
        return jax.lax.fori_loop(0, k, lambda _, u: op(u), v)

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i")))


def main(argv=None) -> int:
    import jax_accl

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--sizes", default="64KiB,1MiB,16MiB")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args(argv)
    jax.config.update("jax_num_cpu_devices", args.devices)
    n = args.devices
    mesh = jax.make_mesh((n,), ("i",))
    print(
        f"# {n} CPU devices in one process, float32; per op (2K - K ops) / K, median of {args.reps}"
    )
    header = ("collective", "size", "jax.lax us", "jax_accl us", "busbw GB/s", "speedup")
    print("# {:<13} {:>6} {:>11} {:>12} {:>11} {:>8}".format(*header))
    for size in (parse_size(s) for s in args.sizes.split(",")):
        rows = max(n, size // 4 // 16 // n * n)
        x = jax.device_put(
            np.arange(n * rows * 16, dtype=np.float32).reshape(n * rows, 16) % 251,
            NamedSharding(mesh, P("i")),
        )
        for name in ("scatter+gather", "all_gather", "ppermute"):
            k = max(2, min(50, (64 << 20) // max(size, 1)))
            fns = {
                lib: (chained(mesh, ops(mod, n)[name], k), chained(mesh, ops(mod, n)[name], 2 * k))
                for lib, mod in (("lax", jax.lax), ("accl", jax_accl))
            }
            got, want = (np.asarray(fns[lib][0](x)) for lib in ("accl", "lax"))
            np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=f"{name} at {human(size)}")
            times = {lib: [] for lib in fns}
            for fn in (f for pair in fns.values() for f in pair):  # compile, warm up
                call_seconds(fn, x)
            for _ in range(args.reps):
                for lib, (short, long) in fns.items():
                    times[lib].append((call_seconds(long, x) - call_seconds(short, x)) / k)
            per_op = {lib: max(statistics.median(t), 1e-9) for lib, t in times.items()}
            # A scatter+gather op is a psum_scatter then an all_gather: an all-reduce's
            # traffic, 2(n-1)/n of the size; an all_gather's, (n-1)/n (after a local slice).
            factor = {"scatter+gather": 2 * (n - 1) / n, "all_gather": (n - 1) / n}.get(name, 1.0)
            busbw = size / per_op["accl"] * factor / 1e9
            lax_us, accl_us = per_op["lax"] * 1e6, per_op["accl"] * 1e6
            print(
                f"  {name:<13} {human(size):>6} {lax_us:>11.1f} {accl_us:>12.1f} "
                f"{busbw:>11.2f} {lax_us / accl_us:>7.2f}x"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
