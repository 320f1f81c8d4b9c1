"""A plain JAX script that never names jax_accl, as a user's (or a launcher's re-executed
worker) is: one CPU device per process (--devices to say otherwise), jax.distributed
initialized by the path --init names (jax.distributed.initialize, the module's
jax._src.distributed.initialize as jax's test_multiprocess calls it, or the global
state's method), then jit programs on an Explicit mesh whose collectives XLA inserts.

    python plain_jit.py --coordinator H:P --num-processes N --process-id I [--init ...]
        [--again]

--again: then shuts jax.distributed down, clears JAX's backends (which jax requires
before a second initialization), initializes it again (the same path and coordinator)
and runs the step twice more in the same process, on a mesh of the devices in reverse
order (groups XLA has not made yet); the result then also holds the outputs and calls
(so far) of that second session.

Prints ``RESULT <json>``: the outputs (this process's shards), JAX's CPU collectives
implementation, whether the script's own code imported jax_accl (never), and, where
jax_accl was imported for it (JAX_ACCL_XLA_COLLECTIVES=1's start-up hook), the MPI
calls jax_accl carried by function (jax_accl.stats()["xla_collectives"])."""

import argparse
import json
import os
import sys

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
from jax._src import distributed as jax_distributed
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

parser = argparse.ArgumentParser()
parser.add_argument("--coordinator", required=True)
parser.add_argument("--num-processes", type=int, required=True)
parser.add_argument("--process-id", type=int, required=True)
parser.add_argument("--devices", type=int, default=1)
parser.add_argument("--init", default="public", choices=["public", "module", "method"])
parser.add_argument("--again", action="store_true")
args, _ = parser.parse_known_args()

jax.config.update("jax_num_cpu_devices", args.devices)
if os.environ.get("JAX_ACCL_XLA_COLLECTIVES", "0") != "1":
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
initialize = {
    "public": jax.distributed.initialize,
    "module": jax_distributed.initialize,
    "method": jax_distributed.global_state.initialize,
}[args.init]
initialize(args.coordinator, args.num_processes, args.process_id)

n = jax.device_count()
# Integers near the int32 limits, so a sum wraps: compared bitwise with gloo's.
ints = (np.arange(n * 6, dtype=np.int64).reshape(n, 6) * 357_913_941 % 2**32 - 2**31).astype(
    np.int32
)
floats = np.linspace(-1.0, 1.0, n * 8, dtype=np.float32).reshape(n, 8)


def put(x, mesh):
    return jax.make_array_from_callback(x.shape, NamedSharding(mesh, P("x")), lambda i: x[i])


@jax.jit
def step(a, b):
    total = jnp.sum(a, axis=0)  # an all-reduce of int32
    gathered = jax.sharding.reshard(b, P())  # an all-gather
    return total, jnp.max(b, axis=0), gathered


def run_steps(mesh):
    with jax.set_mesh(mesh):
        a, b = put(ints, mesh), put(floats, mesh)
        outputs = [step(a, b) for _ in range(2)][-1]
    return [[np.asarray(s.data).tolist() for s in o.addressable_shards] for o in outputs]


def calls():
    accl = sys.modules.get("jax_accl")  # imported by the start-up hook, never by this script
    if accl is None:
        return None
    return {k: v["calls"] for k, v in accl.stats()["xla_collectives"].items() if v["calls"]}


result = {
    "outputs": run_steps(jax.make_mesh((n,), ("x",), axis_types=(AxisType.Explicit,))),
    "implementation": jax.config.jax_cpu_collectives_implementation,
    "calls": calls(),
    "process_id": args.process_id,
}
if args.again:
    jax_distributed.shutdown()
    jax.extend.backend.clear_backends()
    initialize(args.coordinator, args.num_processes, args.process_id)
    # The devices in the reverse order: groups XLA has not made yet (a new split).
    devices = np.array(jax.devices()[::-1])
    reverse = jax.sharding.Mesh(devices, ("x",), axis_types=(AxisType.Explicit,))
    result["outputs_again"] = run_steps(reverse)
    result["calls_again"] = calls()
print("RESULT " + json.dumps(result), flush=True)
