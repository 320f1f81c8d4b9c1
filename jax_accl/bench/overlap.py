"""`bench --overlap`: how much of an all-reduce XLA hides behind independent compute.

Per size, three jitted shard_map programs over a 1-D mesh of every process's devices:
the all-reduce alone (4 bytes per element, float32), the compute alone (a chain of
unrolled 256x256 float32 matmuls per device, sized to about half the all-reduce's time)
and both in one program, with no data dependency between them, timed in rounds (each
round runs the three once, in a new order). The hidden fraction of a round is
(t_allreduce + t_compute - t_both) / min(t_allreduce, t_compute): 1 when the shorter one
is hidden entirely, 0 when the program takes their sum; reported: its median over the
rounds, beside the median times. Measured for jax_accl.psum and
for jax.lax.psum (XLA's all-reduce; gloo across processes) in the same run. "cores": the
process's CPU seconds per wall second while the all-reduce runs alone (what compute
beside it cannot have)."""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

import jax_accl
from jax_accl.bench.sweep import mesh_of, sharded_rows
from jax_accl.bench.timing import interleaved_seconds_in_step, median_seconds_in_step

MATMUL = 256
MAX_MATMULS = 400


def _programs(mesh, reduce, matmuls: int):
    """(all-reduce alone, compute alone, both): shard_map programs of (x, m) per device."""

    def compute(m):
        for _ in range(matmuls):  # unrolled: XLA:CPU runs a graph of thunks, not a loop
            m = jnp.tanh(m @ m) * 0.5
        return m

    def both(x, m):
        return reduce(x), compute(m)

    def wrap(body, out_specs):
        return jax.jit(
            jax.shard_map(
                body, mesh=mesh, in_specs=(P("i"), P("i")), out_specs=out_specs, check_vma=False
            )
        )

    return (
        wrap(lambda x, m: reduce(x), P("i")),
        wrap(lambda x, m: compute(m), P("i")),
        wrap(both, (P("i"), P("i"))),
    )


def _median(fn, args, reps: int) -> float:
    return median_seconds_in_step(lambda: fn(*args), reps, 2, "jax_accl.bench.overlap")


def _cpu_share(fn, args, reps: int) -> float:
    """This process's CPU time per second of wall time while `fn` runs `reps` times: how
    many cores the all-reduce keeps busy (what compute beside it cannot have)."""
    jax.block_until_ready(fn(*args))
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(reps):
        jax.block_until_ready(fn(*args))
    return (time.process_time() - cpu) / (time.perf_counter() - wall)


def _agreed(value: int) -> int:
    """Process 0's `value`, on every process (every process must compile the same program)."""
    if jax.process_count() == 1:
        return value
    from jax.experimental import multihost_utils

    return int(multihost_utils.broadcast_one_to_all(np.int32(value)))


def measure(size_bytes: int, n: int, reps: int) -> list[dict]:
    """One row per library: the three times and the hidden fraction, this process's."""
    mesh = mesh_of(n)
    x = sharded_rows(mesh, np.ones((n, max(1, size_bytes // 4)), np.float32))
    m = sharded_rows(mesh, np.full((n, MATMUL, MATMUL), 0.01, np.float32))
    libraries = {"jax_accl": jax_accl.psum, "jax.lax": jax.lax.psum}
    rows = []
    matmuls = 1
    for name, psum in libraries.items():
        reduce = lambda v, psum=psum: psum(v, "i")  # noqa: E731
        alone, _, _ = _programs(mesh, reduce, 1)
        cores = _cpu_share(alone, (x, m), reps)
        if name == "jax_accl":
            # Compute of about half the all-reduce, from one matmul's time (process 0's);
            # the all-reduce's time here only sizes it (the rounds below time it).
            t_reduce = _median(alone, (x, m), reps)
            _, one, _ = _programs(mesh, reduce, 8)
            per_matmul = _median(one, (x, m), reps) / 8
            matmuls = _agreed(max(1, min(MAX_MATMULS, round(0.5 * t_reduce / per_matmul))))
        _, compute, both = _programs(mesh, reduce, matmuls)
        rounds = interleaved_seconds_in_step(
            {
                variant: functools.partial(program, x, m)
                for variant, program in (("alone", alone), ("compute", compute), ("both", both))
            },
            reps,
            2,
            "jax_accl.bench.overlap",
        )
        t_reduce, t_compute, t_both = (
            float(np.median(rounds[k])) for k in ("alone", "compute", "both")
        )
        hidden = float(
            np.median(
                [
                    (a + c - b) / min(a, c)
                    for a, c, b in zip(rounds["alone"], rounds["compute"], rounds["both"])
                ]
            )
        )
        reduced, _ = both(x, m)
        got = np.asarray(reduced.addressable_shards[0].data)
        if not np.array_equal(got, np.full_like(got, n)):
            raise AssertionError(f"{name}: the all-reduce beside compute is wrong")
        rows.append(
            dict(
                library=name,
                size_bytes=size_bytes,
                devices=n,
                process=jax.process_index(),
                matmuls=matmuls,
                allreduce_s=t_reduce,
                compute_s=t_compute,
                both_s=t_both,
                sum_s=t_reduce + t_compute,
                hidden=hidden,
                allreduce_cores=cores,
            )
        )
    return rows


def print_rows(rows: list[dict], label: str, out=None) -> None:
    from jax_accl.units import human

    print(f"# overlap, {label}: all-reduce (float32 sum) beside independent 256x256 matmuls")
    print(
        f"{'size':>8} {'library':>9} {'proc':>4} {'matmuls':>7} {'allreduce':>10} "
        f"{'compute':>10} {'both':>10} {'sum':>10} {'hidden':>7} {'cores':>6}"
    )
    for r in rows:
        print(
            f"{human(r['size_bytes']):>8} {r['library']:>9} {r['process']:>4} {r['matmuls']:>7} "
            f"{r['allreduce_s'] * 1e3:8.2f}ms {r['compute_s'] * 1e3:8.2f}ms "
            f"{r['both_s'] * 1e3:8.2f}ms {r['sum_s'] * 1e3:8.2f}ms {r['hidden'] * 100:6.1f}% "
            f"{r['allreduce_cores']:6.2f}"
        )
        if out:
            import json

            out.write(json.dumps({**r, "label": label}) + "\n")
