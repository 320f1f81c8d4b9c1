"""bfloat16 on the wire across processes: float32 sums whose bytes travel as bfloat16.

jax_accl mode (default): jax_accl.psum(..., wire_dtype=jnp.bfloat16) over a 1-D mesh of
every process's devices with each algorithm given (--algorithms), and jax.lax.psum routed
with JAX_ACCL_WIRE_DTYPE=bfloat16 set by the test. --xla: a plain jax.jit sum (XLA's own
all-reduce; JAX_ACCL_XLA_COLLECTIVES=1 and JAX_ACCL_WIRE_DTYPE=bfloat16 set by the test)
and an int32 one. Each device's row of the input is float32 noise made from its index
(every process makes all of them), with exact bfloat16 ties at its start.

Prints ``RESULT <json>``: per variant, each local device's result as uint32 bit
patterns (the test compares them across ranks and with its NumPy model), or with
--digest (large counts) as the SHA-256 of its bytes; and per jax_accl variant the bytes
its second call sent between hosts (that the wire carried bfloat16: as many as the
bfloat16 all-reduce of the rounded operands).
"""

import argparse
import hashlib
import json

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

parser = argparse.ArgumentParser()
parser.add_argument("--coordinator", required=True)
parser.add_argument("--num-processes", type=int, required=True)
parser.add_argument("--process-id", type=int, required=True)
parser.add_argument("--devices", type=int, default=1)
parser.add_argument("--algorithms", default="auto")
parser.add_argument("--count", type=int, default=4099)
parser.add_argument("--xla", action="store_true")
parser.add_argument("--digest", action="store_true")
args, _ = parser.parse_known_args()

jax.config.update("jax_num_cpu_devices", args.devices)
jax.distributed.initialize(args.coordinator, args.num_processes, args.process_id)

import jax_accl  # noqa: E402  (after jax.distributed, as a user's script may)
from jax_accl.testing.wire_rows import rows, to_wire  # noqa: E402

n = jax.device_count()
mesh = jax.make_mesh((n,), ("i",))
table = rows(n, args.count)
x = jax.make_array_from_callback(table.shape, NamedSharding(mesh, P("i")), lambda i: table[i])


def tcp_bytes() -> int:
    """Bytes this process has sent between hosts (every TCP rail) so far."""
    transports = jax_accl.stats()["transports"]
    return sum(v["bytes_sent"] for k, v in transports.items() if k.startswith("tcp:"))


def timed_bytes(program, operand) -> tuple:
    """`program(operand)` run twice (the first connects and plans): the second's result
    and the bytes it sent between hosts."""
    jax.block_until_ready(program(operand))
    before = tcp_bytes()
    out = jax.block_until_ready(program(operand))
    return out, tcp_bytes() - before


def local_bits(array) -> list:
    shards = sorted(array.addressable_shards, key=lambda s: s.device.id)
    if args.digest:
        return [hashlib.sha256(np.asarray(s.data).tobytes()).hexdigest() for s in shards]
    return [np.asarray(s.data).reshape(-1).view(np.uint32).tolist() for s in shards]


result = {}
if args.xla:
    summed = jax.jit(lambda a: jnp.sum(a, axis=0), out_shardings=NamedSharding(mesh, P()))
    result["xla_sum"] = local_bits(summed(x))
    ints = jax.make_array_from_callback(
        (n, 8), NamedSharding(mesh, P("i")), lambda i: (np.arange(8 * n).reshape(n, 8) * 7)[i]
    )
    exact = np.asarray(summed(ints.astype(jnp.int32)).addressable_shards[0].data)
    result["xla_int_sum"] = exact.tolist()
    result["calls"] = jax_accl.stats()["xla_collectives"]["MPI_Allreduce"]["calls"]
else:
    rounded = jax.make_array_from_callback(
        table.shape, NamedSharding(mesh, P("i")), lambda i: to_wire(table)[i]
    )
    for algorithm in args.algorithms.split(","):

        def each(reduce):
            spec = P("i")
            return jax.jit(jax.shard_map(reduce, mesh=mesh, in_specs=spec, out_specs=spec))

        wire = each(
            lambda v, a=algorithm: jax_accl.allreduce(v, "i", algorithm=a, wire_dtype=jnp.bfloat16)
        )
        out, result[algorithm + " tcp bytes"] = timed_bytes(wire, x)
        result[algorithm] = local_bits(out)
        # The definition: jax_accl's bfloat16 sum of the operands rounded once, widened.
        by_hand = each(
            lambda v, a=algorithm: jax_accl.allreduce(v, "i", algorithm=a).astype(jnp.float32)
        )
        out, result[algorithm + " of rounded operands tcp bytes"] = timed_bytes(by_hand, rounded)
        result[algorithm + " of rounded operands"] = local_bits(out)
    routed = jax.jit(
        jax_accl.shard_map(
            lambda v: jax.lax.psum(v, "i"), mesh=mesh, in_specs=P("i"), out_specs=P()
        )
    )
    result["routed"] = local_bits(routed(x))
print("RESULT " + json.dumps(result), flush=True)
