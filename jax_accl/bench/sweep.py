"""What the benchmark measures: one size's variants (jax.lax.psum, jax_accl with each
algorithm) over a 1-D mesh of every process's devices, each checked against NumPy, and
a gradient-like pytree fused and unfused."""

from __future__ import annotations

import statistics

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jax_accl
from jax_accl.bench.report import nccl_row
from jax_accl.bench.timing import (
    chain_length,
    interleaved_seconds_in_step,
    median_call_seconds,
    per_op_interleaved,
)
from jax_accl.units import human, parse_size


class BenchRows:
    """n rows of small integers (exact sums in float32), one per device, row d made from
    seed d when asked: a process holds only its own devices' rows (and, while summing,
    one more), never all n at once, so that 16 hosts x 64 MiB fit in memory (the whole
    table was 1 GiB in every process, 3 GiB while it was made)."""

    def __init__(self, size_bytes: int, n: int):
        self.n = n
        self.shape = (n, max(1, size_bytes // 4))

    def row(self, d: int) -> np.ndarray:
        rng = np.random.default_rng(d)
        return rng.integers(-8, 8, self.shape[1], dtype=np.int8).astype(np.float32)

    def __getitem__(self, index) -> np.ndarray:
        """The rows `index` asks for (jax.make_array_from_callback's index of a shard)."""
        rows, rest = index[0], index[1:]
        return np.stack([self.row(d)[rest] for d in range(self.n)[rows]])

    def sum(self) -> np.ndarray:
        """The rows' sum, the all-reduce's exact result, made a row at a time."""
        total = np.zeros(self.shape[1], np.float32)
        for d in range(self.n):
            total += self.row(d)
        return total


def mesh_of(n: int):
    """A 1-D mesh "i" over n devices, process by process (all processes' devices)."""
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))[:n]
    return Mesh(np.array(devices), ("i",))


def sharded_rows(mesh, host: BenchRows | np.ndarray):
    """`host`'s rows spread over the mesh, row d on device d (only this process's made)."""
    return jax.make_array_from_callback(
        host.shape, NamedSharding(mesh, P("i")), lambda index: host[index]
    )


def chained(mesh, reduce, steps: int):
    """A jitted program of `steps` all-reduces `reduce`, each feeding the next."""

    def body(a):
        return jax.lax.fori_loop(0, steps, lambda _, v: reduce(v), a)

    return jax.jit(
        jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"), check_vma=False)
    )


def _first_local_block(array) -> np.ndarray:
    return np.asarray(min(array.addressable_shards, key=lambda s: s.device.id).data)[0]


def measure(
    size_bytes: int,
    n: int,
    algorithms,
    loop: int,
    reps: int,
    baseline: bool = True,
    one_call: bool = True,
):
    """[(variant, seconds per all-reduce)], {variant: seconds of one call}, {variant:
    seconds one call adds to a step} (both one_call_interleaved; empty unless
    `one_call`), {variant: the algorithm it ran}, {variant: seconds per call in each
    phase of the hierarchy}, {variant: this process's CPU seconds per all-reduce}: per op
    is (time of 2K chained ops - time of K) / K, with K = loop. The variants:
    jax.lax.psum (unless not `baseline`), then jax_accl with each algorithm."""
    mesh = mesh_of(n)
    host = BenchRows(size_bytes, n)
    x = sharded_rows(mesh, host)
    want = host.sum()

    ran, chains, phases, launches = {}, {}, {}, {}
    variants = [("jax.lax.psum", lambda v: jax.lax.psum(v, "i"))][: int(baseline)] + [
        (f"accl:{alg}", accl_reduce(alg)) for alg in algorithms
    ]
    for name, reduce in variants:
        once = jax.jit(
            jax.shard_map(reduce, mesh=mesh, in_specs=P("i"), out_specs=P("i"), check_vma=False)
        )
        calls_before = _calls_by_algorithm()
        got = _first_local_block(once(x))
        if name.startswith("accl:"):  # what it ran (auto's choice), from the library's counters
            ran[name] = _most_called_since(calls_before)
        if not np.array_equal(got, want):
            raise AssertionError(f"{name} at {human(size_bytes)}: wrong result")
        phases_before = jax_accl.stats()["phase_seconds"]
        jax.block_until_ready(once(x))
        if name.startswith("accl:"):  # per call and device thread
            phases_after = jax_accl.stats()["phase_seconds"]
            calls = jax.local_device_count()
            phases[name] = {k: (phases_after[k] - phases_before[k]) / calls for k in phases_after}
        if one_call:
            launches[name] = (once, _in_step(mesh, reduce, x, want))
        chains[name] = (chained(mesh, reduce, loop), chained(mesh, reduce, 2 * loop))
    single, in_step = one_call_interleaved(mesh, launches, x, reps) if one_call else ({}, {})
    per_op, cpu = per_op_interleaved(chains, x, loop, reps, size_bytes)
    return list(per_op.items()), single, in_step, ran, phases, cpu


def _in_step(mesh, reduce, x, want):
    """A launch whose all-reduce's operand is computed in it, as a step's gradients are
    (halved: exact on the rows' small integers, and not folded away), checked."""
    step = jax.jit(
        jax.shard_map(
            lambda v: reduce(v * 0.5), mesh=mesh, in_specs=P("i"), out_specs=P("i"), check_vma=False
        )
    )
    if not np.array_equal(_first_local_block(step(x)), want * 0.5):
        raise AssertionError("the all-reduce of a halved operand: wrong result")
    return step


def one_call_interleaved(mesh, launches: dict, x, reps: int):
    """({variant: seconds of one launch holding one all-reduce of the program's argument},
    {variant: seconds one all-reduce adds to a launch that computes its operand}): what a
    step sees, one call per launch and gradient bucket. The first: the launch's whole
    time (dispatch, XLA's fresh result and its page faults included). The second: the
    median launch of reduce(x * 0.5) less the median of x * 0.5 alone (the same fresh
    buffer and the pass that makes the operand, without the all-reduce), which it also
    holds as "fresh result". Every launch started by all processes together, the
    variants in a new order each round."""
    compute = jax.jit(
        jax.shard_map(lambda v: v * 0.5, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    )
    calls = {"compute": lambda: compute(x)}
    for name, (once, step) in launches.items():
        calls[name] = lambda once=once: once(x)
        calls[name + " in step"] = lambda step=step: step(x)
    times = interleaved_seconds_in_step(calls, reps, 1, "bench one call")
    median = {k: statistics.median(v) for k, v in times.items()}
    single = {name: median[name] for name in launches}
    in_step = {name: max(0.0, median[name + " in step"] - median["compute"]) for name in launches}
    in_step["fresh result"] = median["compute"]
    return single, in_step


def accl_reduce(variant: str):
    """jax_accl's all-reduce for one --algorithms entry: an algorithm, and with "+bf16"
    (e.g. auto+bf16) the float32 values on the wire as bfloat16 (wire_dtype; the rows'
    small integers and their sums are exact in bfloat16, so the result check holds)."""
    algorithm, _, wire = variant.partition("+")
    if wire not in ("", "bf16"):
        raise ValueError(f"--algorithms: {variant!r}: the only suffix is +bf16")
    wire_dtype = jnp.bfloat16 if wire else None
    return lambda v: jax_accl.allreduce(v, "i", algorithm=algorithm, wire_dtype=wire_dtype)


def wire_bytes(variant: str, size_bytes: int) -> int:
    """The bytes of a variant's buffer as they travel: half for a +bf16 variant."""
    return size_bytes // 2 if variant.endswith("+bf16") else size_bytes


def _calls_by_algorithm() -> dict:
    return {name: a["calls"] for name, a in jax_accl.stats()["algorithms"].items()}


def _most_called_since(before: dict) -> str:
    """The algorithm this process ran most often since `before` (_calls_by_algorithm)."""
    after = _calls_by_algorithm()
    return max(after, key=lambda name: after[name] - before.get(name, 0))


def measure_pytree(n: int, leaves: int, reps: int):
    """A gradient-like pytree (`leaves` leaves of model-like sizes): leaf-by-leaf
    jax.lax.psum against jax_accl.psum fused into one call, and jax_accl unfused."""

    mesh = mesh_of(n)
    shapes = [(256, 256), (256,), (256, 1024), (1024,), (1024, 256), (256,), (16,), ()]
    rng = np.random.default_rng(0)
    tree = [
        rng.integers(-8, 8, (n,) + shapes[k % len(shapes)]).astype(np.float32)
        for k in range(leaves)
    ]
    specs = [P("i")] * leaves
    args = [
        jax.make_array_from_callback(t.shape, NamedSharding(mesh, s), lambda index, t=t: t[index])
        for t, s in zip(tree, specs)
    ]
    nbytes = sum(t[0].nbytes for t in tree)

    # The step computes the leaves before reducing them, as a train step computes its
    # gradients (halving is exact here; XLA would fold away x * 1): the all-reduce gets
    # intermediates, as in training, not the jitted function's own arguments.
    def build(reduce):
        def step(t):
            return reduce([x * 0.5 for x in t])

        return jax.jit(
            jax.shard_map(step, mesh=mesh, in_specs=(specs,), out_specs=specs, check_vma=False)
        )

    results = {}
    variants = [
        ("jax.lax.psum leaf by leaf", lambda t: [jax.lax.psum(x, "i") for x in t]),
        ("jax_accl.psum fused", lambda t: jax_accl.psum(t, "i")),
        ("jax_accl.psum unfused", lambda t: [jax_accl.psum(x, "i") for x in t]),
    ]
    for name, reduce in variants:
        fn = build(reduce)
        got = fn(args)
        for g, t in zip(got, tree):
            if not np.array_equal(_first_local_block(g), t.sum(0) * 0.5):
                raise AssertionError(f"{name}: wrong result")
        results[name] = median_call_seconds(fn, args, reps)
    return nbytes, results


def run_sweep(args, n: int, label: str, on_size=None) -> list[dict]:
    """Every size, jax.lax.psum and each algorithm: rows in nccl-tests units;
    `on_size(bytes)` is called as each size starts."""
    algorithms = [a for a in args.algorithms.split(",") if a]
    rows = []
    for size in (parse_size(s) for s in args.sizes.split(",")):
        if on_size:
            on_size(size)
        timings, single, in_step, ran, phases, cpu = measure(
            size, n, algorithms, chain_length(size, args.loop, n), args.reps
        )
        base = dict(timings)["jax.lax.psum"]
        rows += [
            nccl_row(
                dict(
                    setting=label,
                    size_bytes=size,
                    devices=n,
                    variant=name,
                    seconds_per_op=t,
                    single_call_s=single[name],
                    in_step_s=in_step[name],
                    fresh_result_s=in_step["fresh result"],
                    cpu_s_per_op=cpu[name],
                    **({"ran": ran[name]} if name in ran else {}),
                    **({"phase_s": phases[name]} if name in phases else {}),
                ),
                base,
            )
            for name, t in timings
        ]
    return rows
