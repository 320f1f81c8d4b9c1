"""Where one all-reduce per launch spends its time (docs/benchmarks.md, "One call per
launch"): jax_accl against jax.lax (gloo across processes), every variant compiled in one
process and timed interleaved, each launch started by every process together.

    python benchmarks/one_call.py inproc 4,16,64 7    # 1 process x 8 CPU devices
    python benchmarks/one_call.py procs 4,16,64 7     # 2 processes x 1 device

Sizes in MiB per device, then rounds. Per size, the medians in ms of:
  acc:param-aliased  jax_accl on the program's argument, lowered in place as before the
                     change (XLA copies the argument first)
  acc:param          the same, as lowered now (no alias: no copy)
  acc:donated        the same on a donated argument (in place, no fresh buffer)
  acc:interm, lax:interm   the all-reduce of x * 0.5 (an operand computed in the launch)
  mul-only           x * 0.5 alone (a launch writing one fresh result)
  tiny               a 16-byte launch (dispatch)
  *:perop            per op of K and 2K chained in a fori_loop, (t(2K) - t(K)) / K
  *:callms           jax_accl's own time per call (jax_accl.stats())
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("inproc", "procs", "worker"))
    parser.add_argument("sizes", help="MiB per device, comma-separated (4,16,64)")
    parser.add_argument("rounds", type=int)
    parser.add_argument("worker", nargs="*", help=argparse.SUPPRESS)  # process id, port
    return parser.parse_args(argv)


def main(args) -> None:
    MODE, SIZES, REPS = args.mode, args.sizes, args.rounds
    if MODE == "inproc":
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    if MODE == "procs":
        from jax_accl.testing import launch

        port = launch.free_port()
        procs = [
            subprocess.Popen(
                [sys.executable, __file__, "worker", SIZES, str(REPS), str(i), str(port)],
                env=launch.worker_env(),
            )
            for i in range(2)
        ]
        sys.exit(max(p.wait(timeout=3000) for p in procs))

    import jax  # noqa: E402
    import numpy as np  # noqa: E402
    from jax.sharding import Mesh, NamedSharding  # noqa: E402
    from jax.sharding import PartitionSpec as P  # noqa: E402

    if MODE == "worker":
        from jax_accl.testing import launch

        launch.join_job(1, f"127.0.0.1:{args.worker[1]}", 2, int(args.worker[0]))

    import jax_accl  # noqa: E402
    from jax_accl.bench.timing import barrier  # noqa: E402
    from jax_accl.primitives import operand_origin  # noqa: E402

    K = 4
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    n = len(devices)
    mesh = Mesh(np.array(devices), ("i",))
    sharding = NamedSharding(mesh, P("i"))

    def sm(f):
        return jax.shard_map(f, mesh=mesh, in_specs=P("i"), out_specs=P("i"), check_vma=False)

    def acc(v):
        return jax_accl.allreduce(v, "i")

    def lax(v):
        return jax.lax.psum(v, "i")

    def chained(reduce, k):
        return jax.jit(sm(lambda a: jax.lax.fori_loop(0, k, lambda _, v: reduce(v), a)))

    def seconds(fn, arg):
        barrier("one_call")
        start = time.perf_counter()
        jax.block_until_ready(fn(arg))
        return time.perf_counter() - start

    def accl_totals():
        stats = jax_accl.stats()["algorithms"].values()
        return sum(a["seconds"] for a in stats), sum(a["calls"] for a in stats)

    def programs(x):
        """{name: (program, whether its argument is donated)}."""
        keep = operand_origin.unalias_kept_arguments
        operand_origin.unalias_kept_arguments = lambda module: 0  # the lowering before
        try:
            aliased = jax.jit(sm(acc)).lower(x).compile()
        finally:
            operand_origin.unalias_kept_arguments = keep
        small = jax.make_array_from_callback(
            (n, 4), sharding, lambda i: np.ones((1, 4), np.float32)
        )
        tiny = jax.jit(sm(lambda v: v * 0.5)).lower(small).compile()
        return {
            "tiny": (lambda _: tiny(small), False),
            "acc:param-aliased": (aliased, False),
            "lax:param": (jax.jit(sm(lax)), False),
            "acc:param": (jax.jit(sm(acc)), False),
            "acc:donated": (jax.jit(sm(acc), donate_argnums=0), True),
            "lax:interm": (jax.jit(sm(lambda v: lax(v * 0.5))), False),
            "acc:interm": (jax.jit(sm(lambda v: acc(v * 0.5))), False),
            "mul-only": (jax.jit(sm(lambda v: v * 0.5)), False),
            "lax:loopK": (chained(lax, K), False),
            "lax:loop2K": (chained(lax, 2 * K), False),
            "acc:loopK": (chained(acc, K), False),
            "acc:loop2K": (chained(acc, 2 * K), False),
        }

    def measure(size):
        x = jax.make_array_from_callback(
            (n, size // 4), sharding, lambda i: np.ones((1, size // 4), np.float32)
        )
        fresh = jax.jit(sm(lambda v: v * 0.5))  # a donated argument's own buffer
        progs = programs(x)
        times = {k: [] for k in progs}
        own = {k: [] for k in progs}
        for fn, donated in progs.values():  # compile, warm up
            for _ in range(2):
                jax.block_until_ready(fn(fresh(x) if donated else x))
        for rep in range(REPS):
            order = list(progs)
            random.Random(rep).shuffle(order)  # the same order in every process
            for name in order:
                fn, donated = progs[name]
                arg = jax.block_until_ready(fresh(x)) if donated else x
                before = accl_totals()
                times[name].append(seconds(fn, arg))
                after = accl_totals()
                if after[1] > before[1]:
                    own[name].append((after[0] - before[0]) / (after[1] - before[1]))
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        row = {"size_mib": size >> 20, **{k: round(v, 2) for k, v in med.items()}}
        for lib in ("lax", "acc"):
            row[f"{lib}:perop"] = round((med[f"{lib}:loop2K"] - med[f"{lib}:loopK"]) / K, 2)
        for k in ("acc:param-aliased", "acc:param", "acc:donated", "acc:interm", "acc:loop2K"):
            row[k + ":callms"] = round(statistics.median(own[k]) * 1e3, 2)
        return row

    rows = [measure(int(s) << 20) for s in SIZES.split(",")]
    if jax.process_index() == 0:
        print("load", os.getloadavg())
        for r in rows:
            print(json.dumps(r))
    if MODE == "worker":
        jax.distributed.shutdown()


if __name__ == "__main__":
    main(parse_args())
