"""One jax.lax collective in a shard_map, on a mesh of every process's device or (with
--members) of some processes only, in that order, as jax's array_test
test_shard_map_no_local_devices does: the others then run nothing, and XLA makes the
communicator from the participating processes only. Never names jax_accl.

    python collective.py --coordinator H:P --num-processes N --process-id I
        [--members 0,1] [--op psum|all_gather|psum_y_then_x] [--dtype int32|float16]
        [--workaround] [--aot AB|BA] [--deserialized]

psum_y_then_x: on a 2 x (N/2) mesh ("x", "y") of the devices, a psum over "y", a
multiplication by a number of the "x" position, then a psum over "x": two groups of one
program that start with the same device (process 0's, first of both), made in the
program's order.

--aot AB: on a 2 x (N/2) mesh, two programs compiled ahead of time (jit's
.lower().compile()) before either runs, A (a psum over "y") first and B (a psum over both
axes) last, then A run; --aot BA: B compiled first, A last, then B run. A's group of
process 0 and B's both start with process 0's device.

--deserialized: B (a psum over every process) compiled ahead of time and serialized
(jax.experimental.serialize_executable), then jax.distributed shut down and initialized
again: a new job, none of whose programs jax_accl's library knows, as in a process that
loads B from an AOT or compile cache. Then A (a psum over processes 0 and 1) compiled
ahead of time and not run, and B deserialized (deserialize_and_load, which compiles
nothing) and run, A kept alive meanwhile. A's group [0, 1] and B's both start with
process 0's device.

--workaround: a float16 collective written as the XLA-backend docs' workaround (a psum
summed as float32 and cast back; an all-gather of the bits as uint16). Prints
``RESULT <json>``: this process's shards of the result, or the error the program raised,
and jax_accl's calls where its hook imported it."""

import argparse
import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

parser = argparse.ArgumentParser()
parser.add_argument("--coordinator", required=True)
parser.add_argument("--num-processes", type=int, required=True)
parser.add_argument("--process-id", type=int, required=True)
parser.add_argument("--members", default=None)
parser.add_argument("--op", default="psum", choices=["psum", "all_gather", "psum_y_then_x"])
parser.add_argument("--dtype", default="int32", choices=["int32", "float16"])
parser.add_argument("--workaround", action="store_true")
parser.add_argument("--aot", default=None, choices=["AB", "BA"])
parser.add_argument("--deserialized", action="store_true")
args, _ = parser.parse_known_args()

jax.config.update("jax_num_cpu_devices", 1)
if os.environ.get("JAX_ACCL_XLA_COLLECTIVES", "0") != "1":
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(args.coordinator, args.num_processes, args.process_id)

by_process = {d.process_index: d for d in jax.devices()}
members = [int(p) for p in args.members.split(",")] if args.members else sorted(by_process)
devices = [by_process[p] for p in members]
n = len(devices)
if args.op == "psum_y_then_x" or args.aot:
    mesh = jax.sharding.Mesh(np.array(devices).reshape(2, n // 2), ("x", "y"))
    spec = P(("x", "y"))
else:
    mesh = jax.sharding.Mesh(np.array(devices), ("x",))
    spec = P("x")
dtype = np.dtype(args.dtype)
if dtype == np.int32:  # near the int32 limits: the sum wraps, compared bitwise
    x_np = np.arange(n * 4, dtype=np.int64).reshape(n, 4) * 1_000_000_007 % 2**32 - 2**31
else:
    x_np = np.linspace(-2.0, 2.0, n * 4).reshape(n, 4)
x_np = x_np.astype(dtype)
x = jax.make_array_from_callback(
    x_np.shape, NamedSharding(mesh, spec), lambda i: x_np[i], dtype=dtype
)


def body(a):
    if args.op == "psum_y_then_x":
        b = jax.lax.psum(a, "y") * (jax.lax.axis_index("x").astype(a.dtype) + 3)
        return jax.lax.psum(b, "x")
    if args.op == "all_gather" and args.workaround:
        bits = jax.lax.all_gather(jax.lax.bitcast_convert_type(a, jnp.uint16), "x", tiled=True)
        return jax.lax.bitcast_convert_type(bits, a.dtype)
    if args.op == "all_gather":
        return jax.lax.all_gather(a, "x", tiled=True)
    if args.workaround:
        return jax.lax.psum(a.astype(jnp.float32), "x").astype(a.dtype)
    return jax.lax.psum(a, "x")


def psum_program(mesh):
    """jit's compiled psum over the mesh's "x" of an int32 row per device."""
    f = jax.shard_map(lambda a: jax.lax.psum(a, "x"), mesh=mesh, in_specs=P("x"), out_specs=P())
    rows = jax.ShapeDtypeStruct((mesh.size, 4), dtype, sharding=NamedSharding(mesh, P("x")))
    return jax.jit(f).lower(rows).compile()


def deserialized_run():
    """--deserialized (see the docstring): B's result, over the second job's mesh."""
    import jax.extend
    from jax.experimental import serialize_executable

    payload = serialize_executable.serialize(psum_program(mesh))
    jax.distributed.shutdown()
    jax.extend.backend.clear_backends()
    jax.distributed.initialize(args.coordinator, args.num_processes, args.process_id)
    devices = {d.process_index: d for d in jax.devices()}
    # A, kept alive (a program freed unrun no longer counts: docs/xla_collectives.md, "A
    # program that never runs") until B's result is ready.
    a = psum_program(jax.sharding.Mesh(np.array([devices[0], devices[1]]), ("x",)))
    b = serialize_executable.deserialize_and_load(*payload)
    again = jax.sharding.Mesh(np.array([devices[p] for p in sorted(devices)]), ("x",))
    fresh = jax.make_array_from_callback(
        x_np.shape, NamedSharding(again, spec), lambda i: x_np[i], dtype=dtype
    )
    y = jax.block_until_ready(b(fresh))
    del a
    return y


result = {"process_id": args.process_id, "shards": None, "error": None, "calls": None}
try:
    if args.aot:
        programs = {
            "A": lambda a: jax.lax.psum(a, "y"),
            "B": lambda a: jax.lax.psum(a, ("x", "y")),
        }
        compiled = {}
        for name in args.aot:
            g = jax.shard_map(
                programs[name], mesh=mesh, in_specs=spec, out_specs=P(), check_vma=False
            )
            compiled[name] = jax.jit(g).lower(x).compile()
        y = compiled[args.aot[0]](x)
    elif args.deserialized:
        y = deserialized_run()
    else:
        f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=P(), check_vma=False))
        y = f(x)
    result["shards"] = [
        np.asarray(s.data).astype(np.float64).tolist() for s in y.addressable_shards
    ]
except Exception as e:  # reported to the test
    result["error"] = f"{type(e).__name__}: {e}"
accl = sys.modules.get("jax_accl")
if accl is not None:
    stats = accl.stats()["xla_collectives"]
    result["calls"] = {k: v["calls"] for k, v in stats.items() if v["calls"]}
print("RESULT " + json.dumps(result), flush=True)
