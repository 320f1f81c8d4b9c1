"""One process of a job (or a one-process run on 8 devices) whose program holds
jax_accl calls inside `jax.experimental.custom_partitioning` rules: four calls of a rule
whose lower_fn sums its operand with jax_accl.psum, on four independent int32 inputs,
in a plain jax.jit program that XLA's SPMD partitioner partitions. JAX lowers each
rule's lower_fn as a module of its own when XLA calls the rule, at compile time; before
jax_accl gave those calls lanes of their own (jax_accl/primitives/lanes.py) the four
shared one, and across processes one input's sum was paired with another's.

Input `a` reaches its call late on the first rank, `b` on the last (a host callback in
a shard_map before the rule); `c` and `d` go through one rule with equal parameters
(JAX may lower such equations once). Every launch's four results are checked bitwise
against the sums. Prints "RESULT <json>".

    python -m jax_accl.testing.partition_worker   # one process, 8 devices
    (a job of several: launch.run_job(["-m", "jax_accl.testing.partition_worker"], ...))
"""

from __future__ import annotations

import argparse
import json
import os
import time

from jax_accl.testing.reuse_worker import _delay_on_rank

SCALES = (1, 100, 10_000, 1_000_000)  # inputs a, b, c, d: each rank's row times these
RULE_SCALES = (1, 2, 3, 3)  # what each input's rule multiplies its sum by (d: c's rule)


def _summed_by_rule(scale: int):
    """A custom_partitioning function: jax_accl.psum of its operand's blocks (sharded on
    dimension 0 over the mesh's one axis), times `scale`, the result sharded alike."""
    import jax
    from jax.experimental.custom_partitioning import custom_partitioning
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import jax_accl

    @custom_partitioning
    def summed(v):  # the rule's meaning, unpartitioned (not run here)
        n = jax.device_count()
        block = v.reshape(n, -1, *v.shape[1:]).sum(0)
        return jax.numpy.tile(block, (n,) + (1,) * (v.ndim - 1)) * scale

    def partition(mesh, arg_shapes, result_shape):
        del arg_shapes, result_shape
        sharding = NamedSharding(mesh, P(mesh.axis_names[0]))

        def lower_fn(v):
            return jax_accl.psum(v, mesh.axis_names[0]) * scale

        return mesh, lower_fn, sharding, (sharding,)

    def infer(mesh, arg_shapes, result_shape):
        del arg_shapes, result_shape
        return NamedSharding(mesh, P(mesh.axis_names[0]))

    summed.def_partition(
        partition=partition, infer_sharding_from_operands=infer, sharding_rule="i j -> i j"
    )
    return summed


def program(mesh, delay_s: float):
    """The jitted program on (a, b, c, d), each (ranks x width) int32 sharded on its rows:
    a delayed `delay_s` on the first rank, b on the last, then each summed by a rule
    (c and d by one rule object), beside some compute."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    rules = [_summed_by_rule(s) for s in RULE_SCALES[:3]]
    rules.append(rules[2])  # d: c's rule, its parameters equal
    sharded = NamedSharding(mesh, P("x"))

    def delayed(a, b):
        index = jax.lax.axis_index("x")
        last = mesh.size - 1
        return _delay_on_rank(a, index, delay_s, 0), _delay_on_rank(b, index, delay_s, last)

    delay = jax.shard_map(delayed, mesh=mesh, in_specs=(P("x"),) * 2, out_specs=(P("x"),) * 2)

    def run(a, b, c, d):
        if delay_s:
            a, b = delay(a, b)
        m = jnp.full((64, 64), 0.01, jnp.float32)
        for _ in range(6):  # compute beside the calls, so XLA:CPU runs them as data flows
            m = jnp.tanh(m @ m)
        return [rule(v) for rule, v in zip(rules, (a, b, c, d))], m

    return jax.jit(run, in_shardings=(sharded,) * 4, out_shardings=([sharded] * 4, None))


def inputs(mesh, width: int = 1 << 16):
    """(the four global inputs, the sums each result's every row must be): host arrays."""
    import numpy as np

    rows = (np.arange(mesh.size, dtype=np.int32)[:, None] + 1) * np.ones((1, width), np.int32)
    values = [rows * s for s in SCALES]
    wants = [v.sum(0, keepdims=True) * r for v, r in zip(values, RULE_SCALES)]
    return values, wants


def check(mesh, launches: int, delay_s: float) -> int:
    """`launches` launches of the program, each of the four results bitwise against its
    sums; returns how many launches were exact (raises at the first that is not)."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    sharding = NamedSharding(mesh, P("x"))
    values, wants = inputs(mesh)
    args = [jax.make_array_from_callback(v.shape, sharding, lambda i, v=v: v[i]) for v in values]
    run = program(mesh, delay_s)
    for k in range(launches):
        results, _ = run(*args)
        for name, result, want in zip("abcd", results, wants):
            for shard in result.addressable_shards:
                got = np.asarray(shard.data)
                if not np.array_equal(got, np.broadcast_to(want, got.shape)):
                    raise AssertionError(
                        f"launch {k}, input {name!r}: got {got.reshape(-1)[:4]}, want "
                        f"{want.reshape(-1)[:4]} (its sum; a sum paired with another input's "
                        f"call)"
                    )
    return launches


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, default=8, help="this process's devices")
    parser.add_argument("--launches", type=int, default=100)
    parser.add_argument("--delay-s", type=float, default=0.003)
    # The job's (launch.run_job); without them, one process.
    parser.add_argument("--process-id", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--num-processes", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--coordinator", help=argparse.SUPPRESS)
    parser.add_argument("--gloo-interface", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    import jax
    import numpy as np
    from jax.sharding import Mesh

    from jax_accl.testing.launch import worker_devices

    mesh = Mesh(np.array(worker_devices(args)), ("x",))
    started = time.monotonic()
    result = {
        "exact": check(mesh, args.launches, args.delay_s),
        "seconds": round(time.monotonic() - started, 1),
        "process": jax.process_index(),
    }
    if args.num_processes > 1:
        jax.distributed.shutdown()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    main()
