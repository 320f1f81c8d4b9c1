"""One float16 jax.lax collective in a jit of a shard_map over every device of the job
(a 1-D mesh "x"), or (--op pmap_psum) a psum in a jax.pmap over every device, or
(--op jit_max) a plain jit max over rows sharded on "x", whose
all-reduce XLA's partitioner inserts (a float16 max; a sum JAX takes in float32). Never
names jax_accl; gloo unless JAX_ACCL_XLA_COLLECTIVES=1.

    python half_collectives.py --coordinator H:P --num-processes N --process-id I
        --op OP [--devices D] [--workaround]

--workaround (jit_max only): the max taken as float32 and cast back, as the docs say.
Prints ``RESULT <json>``: this process's shards as float16 bits (uint16), the element
type of each collective in the compiled HLO, the error if one was raised, and jax_accl's
MPI calls where its hook imported it."""

import argparse
import json
import os
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

OPS = [
    "psum",
    "pmean",
    "pmax",
    "pmin",
    "all_gather",
    "psum_scatter",
    "all_to_all",
    "ppermute",
    "pmap_psum",
    "jit_max",
]
parser = argparse.ArgumentParser()
parser.add_argument("--coordinator", required=True)
parser.add_argument("--num-processes", type=int, required=True)
parser.add_argument("--process-id", type=int, required=True)
parser.add_argument("--op", required=True, choices=OPS)
parser.add_argument("--devices", type=int, default=1)
parser.add_argument("--workaround", action="store_true")
args, _ = parser.parse_known_args()

jax.config.update("jax_num_cpu_devices", args.devices)
if os.environ.get("JAX_ACCL_XLA_COLLECTIVES", "0") != "1":
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(args.coordinator, args.num_processes, args.process_id)

devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
n = len(devices)
mesh = jax.sharding.Mesh(np.array(devices), ("x",))
spec = P("x")


def inputs(n: int) -> np.ndarray:
    """Each device's block: 2n x 8 float16 values of mixed magnitude (sums round)."""
    rng = np.random.default_rng(61)
    return (rng.standard_normal((n * 2 * n, 8)) * 300).astype(np.float16)


x_np = inputs(n)
x = jax.make_array_from_callback(x_np.shape, NamedSharding(mesh, spec), lambda i: x_np[i])


def body(a):
    if args.op in ("psum", "pmean", "pmax", "pmin"):
        return getattr(jax.lax, args.op)(a, "x")
    if args.op == "all_gather":
        return jax.lax.all_gather(a, "x", tiled=True)
    if args.op == "psum_scatter":
        return jax.lax.psum_scatter(a, "x", scatter_dimension=0, tiled=True)
    if args.op == "all_to_all":
        return jax.lax.all_to_all(a, "x", 0, 0, tiled=True)
    return jax.lax.ppermute(a, "x", [(i, (i + 1) % n) for i in range(n)])


if args.op == "pmap_psum":  # this process's devices' blocks, a psum over every device
    f = jax.pmap(lambda a: jax.lax.psum(a, "i"), axis_name="i", devices=devices)
    mine = [i for i, d in enumerate(devices) if d.process_index == jax.process_index()]
    x = x_np.reshape(n, 2 * n, 8)[mine]
elif args.op == "jit_max":
    if args.workaround:
        f = jax.jit(lambda v: v.astype(jnp.float32).max(axis=0).astype(v.dtype))
    else:
        f = jax.jit(lambda v: v.max(axis=0))
else:
    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec))

KINDS = "all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute"
result = {"process_id": args.process_id, "shards": None, "hlo": None, "error": None, "calls": None}
try:
    text = f.lower(x).compile().as_text()
    result["hlo"] = sorted(
        {
            f"{m.group(2)} {m.group(1)}"
            for m in re.finditer(rf"= \(?([a-z0-9]+)\[[^\n]*? ({KINDS})(?:-start)?\(", text)
        }
    )
    y = f(x)
    result["shards"] = [
        np.asarray(s.data).view(np.uint16).ravel().tolist() for s in y.addressable_shards
    ]
except Exception as e:  # reported to the test
    result["error"] = f"{type(e).__name__}: {e}"
accl = sys.modules.get("jax_accl")
if accl is not None:
    stats = accl.stats()["xla_collectives"]
    result["calls"] = {k: v["calls"] for k, v in stats.items() if v["calls"]}
print("RESULT " + json.dumps(result), flush=True)
