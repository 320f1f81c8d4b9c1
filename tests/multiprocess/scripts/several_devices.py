"""Two jit programs of jax.lax collectives in a shard_map, 4 CPU devices per process,
never naming jax_accl (its start-up hook imports it under JAX_ACCL_XLA_COLLECTIVES=1):

local: a psum over this process's 4 devices only (a mesh of them): XLA's device threads
split MPI_COMM_WORLD among these 4, which meet in memory.

two_local_axes: on a (processes, 2, 2) mesh ("x", "a", "b"), a psum over "a", then over
"b": process p's first device is first of both groups and two of its devices (its
second and third) are second of one each, so a split of that device's color from place
1 does not say which device asks: refused when compiled.

over_a, then over_b: the same two psums as two programs. over_a puts device 2 at place
1 of color 0, where local's group has device 1: admitted, as local has run (XLA launches
a program on several devices of a process once the one before has completed on all of
them, its groups made). over_a is dispatched (not waited for: its device threads split
meanwhile) and over_b, whose device 1 is at that place, compiled and run right after:
admitted too, as over_a was dispatched before it was loaded; both sums right.

ahead: a psum over "b" of a mesh whose processes' devices are laid out (0 3)(1 2),
compiled ahead of time and not run, putting device 3 at place 1 of color 0; then a new
psum over "a" (device 2 there) is refused when compiled: which would ask is not known.

Prints ``RESULT <json>``: each program's shards, or the error it raised, and the
process's MPI calls after the first."""

import json

import jax
import job_start  # scripts/job_start.py, beside this one
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

args = job_start.join(devices=4)


def program(mesh, body, spec):
    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec))
    x = jax.make_array_from_callback(
        (mesh.size,), NamedSharding(mesh, spec), lambda i: np.arange(mesh.size, dtype=np.int32)[i]
    )
    return f, x


def shards(y):
    return [np.asarray(s.data).tolist() for s in y.addressable_shards]


def run_program(f, x):
    try:
        return shards(f(x))
    except Exception as e:  # jax_accl's refusal at loading, or XLA's runtime error
        return f"{type(e).__name__}: {e}"


def run(mesh, body, spec):
    return run_program(*program(mesh, body, spec))


calls = job_start.xla_calls


result = {"process_id": jax.process_index()}
local = jax.sharding.Mesh(np.array(jax.local_devices()), ("l",))
result["local"] = run(local, lambda v: jax.lax.psum(v, "l"), P("l"))
result["local_calls"] = calls()
mesh = jax.sharding.Mesh(
    np.array(sorted(jax.devices(), key=lambda d: d.id)).reshape(-1, 2, 2), ("x", "a", "b")
)
result["two_local_axes"] = run(
    mesh, lambda v: jax.lax.psum(jax.lax.psum(v, "a") * 3, "b"), P(("x", "a", "b"))
)
spec = P(("x", "a", "b"))
over_a, x = program(mesh, lambda v: jax.lax.psum(v, "a"), spec)
over_b, _ = program(mesh, lambda v: jax.lax.psum(v, "b"), spec)
pending = over_a(x)  # dispatched: its device threads split while over_b is loaded
result["over_b"] = run_program(over_b, x)
result["over_a"] = shards(pending)
result["over_a_again"] = shards(over_a(x))
crossed = [[d for d in jax.devices() if d.process_index == p] for p in range(jax.process_count())]
crossed = np.array([[ds[0], ds[3], ds[1], ds[2]] for ds in crossed]).reshape(-1, 2, 2)
ahead, y = program(
    jax.sharding.Mesh(crossed, ("x", "a", "b")), lambda v: jax.lax.psum(v, "b"), spec
)
ahead.lower(y).compile()  # loaded, not run
twice_over_a, _ = program(mesh, lambda v: jax.lax.psum(v * 2, "a"), spec)
result["after_ahead"] = run_program(twice_over_a, x)
print("RESULT " + json.dumps(result), flush=True)
