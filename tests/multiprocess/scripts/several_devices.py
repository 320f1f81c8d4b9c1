"""Two jit programs of jax.lax collectives in a shard_map, 4 CPU devices per process,
never naming jax_accl (its start-up hook imports it under JAX_ACCL_XLA_COLLECTIVES=1):

local: a psum over this process's 4 devices only (a mesh of them): XLA's device threads
split MPI_COMM_WORLD among these 4, which meet in memory.

two_local_axes: on a (processes, 2, 2) mesh ("x", "a", "b"), a psum over "a", then over
"b": process p's first device is first of both groups and two of its devices (its
second and third) are second of one each, so a split of that device's color from place
1 does not say which device asks: refused when compiled.

over_a, then over_b: the same two psums as two programs. over_a puts device 2 at place
1 of color 0, where local's group has device 1: admitted, as local has run and device 2
is in local's group (so local's group is made before device 2 asks). over_a is
dispatched (not waited for: its device threads make its splits meanwhile) and over_b
compiled right after: its device 1 at that place is not in over_a's group, so it is
refused, whatever over_a's threads have done by then; over_a's result, and a second run
of it, are then read.

Prints ``RESULT <json>``: each program's shards, or the error it raised, and the
process's MPI calls after the first."""

import argparse
import json

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

parser = argparse.ArgumentParser()
parser.add_argument("--coordinator", required=True)
parser.add_argument("--num-processes", type=int, required=True)
parser.add_argument("--process-id", type=int, required=True)
args, _ = parser.parse_known_args()

jax.config.update("jax_num_cpu_devices", 4)
jax.distributed.initialize(args.coordinator, args.num_processes, args.process_id)


def program(mesh, body, spec):
    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec))
    x = jax.make_array_from_callback(
        (mesh.size,), NamedSharding(mesh, spec), lambda i: np.arange(mesh.size, dtype=np.int32)[i]
    )
    return f, x


def shards(y):
    return [np.asarray(s.data).tolist() for s in y.addressable_shards]


def run(mesh, body, spec):
    f, x = program(mesh, body, spec)
    try:
        return shards(f(x))
    except Exception as e:  # jax_accl's refusal at loading, or XLA's runtime error
        return f"{type(e).__name__}: {e}"


def calls():
    import jax_accl  # already imported by its start-up hook; only to read its counters

    stats = jax_accl.stats()["xla_collectives"]
    return {k: v["calls"] for k, v in stats.items() if v["calls"]}


result = {"process_id": jax.process_index()}
local = jax.sharding.Mesh(np.array(jax.local_devices()), ("l",))
result["local"] = run(local, lambda v: jax.lax.psum(v, "l"), P("l"))
result["local_calls"] = calls()
mesh = jax.make_mesh((jax.process_count(), 2, 2), ("x", "a", "b"))
result["two_local_axes"] = run(
    mesh, lambda v: jax.lax.psum(jax.lax.psum(v, "a") * 3, "b"), P(("x", "a", "b"))
)
spec = P(("x", "a", "b"))
over_a, x = program(mesh, lambda v: jax.lax.psum(v, "a"), spec)
over_b, _ = program(mesh, lambda v: jax.lax.psum(v, "b"), spec)
pending = over_a(x)  # dispatched: its device threads split while over_b is compiled
try:
    result["over_b"] = shards(over_b(x))
except Exception as e:
    result["over_b"] = f"{type(e).__name__}: {e}"
result["over_a"] = shards(pending)
result["over_a_again"] = shards(over_a(x))
print("RESULT " + json.dumps(result), flush=True)
