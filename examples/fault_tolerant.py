"""Data-parallel training that goes on when a process dies and takes it back when it
returns: JAX's fault-tolerance API (jax_enable_recoverability, live_devices) on CPU,
with jax_accl carrying the collectives.

Every step runs inside `live_devices`: on the devices of the processes alive then. When
a process dies (SIGKILL, a lost machine), the others' step raises, `live_devices` names
the survivors once jax.distributed's heartbeat has missed the dead one, and the next
steps run on a mesh of theirs, each on a larger share of the batch. Start the dead
process again with its --process-id: it joins at its first `live_devices`, finds that
its step is behind, and the lowest live process sends it the weights and the step (a
psum over the two devices, the other side adding zeros); then all train together again.

    python fault_tolerant.py --coordinator 127.0.0.1:8476 --num-processes 4 --process-id 0

and the same with --process-id 1, 2 and 3, each in a shell of its own; then kill one of
1, 2, 3 (kill -9) and, a little later, run its line again.

--path shard_map (the default) runs the step as jax_accl.shard_map with jax.lax.pmean
inside; --path jit as plain jax.jit of sharded arrays, whose all-reduces are XLA's
(run it with JAX_ACCL_XLA_COLLECTIVES=1, so that jax_accl carries them: XLA:CPU's gloo
waits for a dead peer forever). Process 0 must live: it runs jax.distributed's
coordinator. Each process prints one JSON line per step (its step, live devices, loss
and the weights' bytes in hex, equal on every process) and, at the end, the jax_accl
calls it made.
"""

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.multihost_utils import ProcessFailureError, live_devices
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import jax_accl

FEATURES = 8


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="python fault_tolerant.py", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--coordinator", required=True, help="host:port of process 0")
    parser.add_argument("--num-processes", type=int, required=True)
    parser.add_argument("--process-id", type=int, required=True)
    parser.add_argument("--devices", type=int, default=1, help="CPU devices per process")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--path", choices=("shard_map", "jit"), default="shard_map")
    parser.add_argument("--batch", type=int, default=16, help="examples per device")
    parser.add_argument("--heartbeat", type=int, default=10, help="jax.distributed's, in s")
    parser.add_argument("--pause", type=float, default=0.0, help="seconds between steps")
    return parser.parse_args(argv)


def join(args):
    jax.config.update("jax_num_cpu_devices", args.devices)
    jax.config.update("jax_enable_recoverability", True)
    jax.distributed.initialize(
        args.coordinator,
        args.num_processes,
        args.process_id,
        heartbeat_timeout_seconds=args.heartbeat,
    )


def mesh_of(devices):
    return jax.make_mesh((len(devices),), ("i",), axis_types=(AxisType.Auto,), devices=devices)


def replicated(value, devices):
    """`value` (host data) on every device of `devices`, typed replicated, each process
    placing its own copies (of its own `value`: the same on every process but in
    psum_of_two)."""
    value = np.asarray(value)
    sharding = NamedSharding(mesh_of(devices), P())
    return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])


def sharded(value, devices):
    """`value` (the global array, the same on every process) split over `devices` along
    its first axis, each process placing its own shards."""
    value = np.asarray(value)
    sharding = NamedSharding(mesh_of(devices), P("i"))
    return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])


def loss_of(weights, x, y):
    return jnp.mean((x @ weights - y) ** 2)


def make_step(path, learning_rate=0.05):
    """step(weights, x, y, devices) -> (loss, new weights), replicated on `devices`."""
    if path == "jit":
        grad = jax.jit(jax.value_and_grad(loss_of))  # XLA's all-reduce over the batch

        def step(weights, x, y, devices):
            loss, g = grad(weights, x, y)
            return loss, weights - learning_rate * g

        return step

    def body(weights, x, y):  # one device's share; jax.lax inside, jax_accl around it
        loss, g = jax.value_and_grad(loss_of)(weights, x, y)
        return jax.lax.pmean(loss, "i"), weights - learning_rate * jax.lax.pmean(g, "i")

    compiled = {}

    def step(weights, x, y, devices):
        key = tuple(d.id for d in devices)
        if key not in compiled:
            specs = dict(in_specs=(P(), P("i"), P("i")), out_specs=(P(), P()))
            compiled[key] = jax.jit(jax_accl.shard_map(body, mesh=mesh_of(devices), **specs))
        return compiled[key](weights, x, y)

    return step


def psum_of_two(value, source, target, path):
    """The sum over the two devices `source` and `target` of each one's `value`: how the
    source sends its `value` (the target passes zeros), as JAX's own recovery example
    does: the input is declared replicated (P()) but each process places its own value,
    so its two buffers differ, and jax.lax.psum sums the buffers (on both paths)."""
    devices = [source, target]
    shard_map = jax_accl.shard_map if path == "shard_map" else jax.shard_map
    summed = shard_map(
        lambda v: jax.lax.psum(v, "i"), mesh=mesh_of(devices), in_specs=P(), out_specs=P()
    )
    return np.asarray(summed(replicated(value, devices)).addressable_data(0))


def steps_of(step, devices, path):
    """Every live device's step (an all-gather), in the order of `devices`."""
    shard_map = jax_accl.shard_map if path == "shard_map" else jax.shard_map
    gather = shard_map(
        lambda s: jax.lax.all_gather(s, "i", tiled=True),
        mesh=mesh_of(devices),
        in_specs=P("i"),
        out_specs=P("i"),  # each device's block is the whole gather
    )
    mine = np.array([step] * len(devices), np.int32)
    return np.asarray(gather(sharded(mine, devices)).addressable_data(0))


def catch_up(step, weights, devices, path):
    """Where a device's step differs from the first live device's (a process that came
    back), that device's process takes the first's weights and step from it."""
    steps = steps_of(step, devices, path)
    source, me = devices[0], jax.process_index()
    for device, theirs in zip(devices, steps):
        if theirs == steps[0] or me not in (source.process_index, device.process_index):
            continue
        sending = me == source.process_index
        w = psum_of_two(weights if sending else 0 * weights, source, device, path)
        s = psum_of_two(np.array([step if sending else 0], np.int32), source, device, path)
        if me == device.process_index:
            weights, step = w, int(s[0])
    return step, weights


def data(step, count):
    """The global batch of `step` for `count` examples: the same on every process."""
    rng = np.random.default_rng(1000 + step)
    x = rng.normal(size=(count, FEATURES)).astype(np.float32)
    true_weights = np.arange(1, FEATURES + 1, dtype=np.float32)
    y = x @ true_weights + 0.01 * rng.normal(size=count).astype(np.float32)
    return x, y


def train(args, step_fn, between_steps=None):
    """Trains until step args.steps on the live devices; returns the final weights."""
    me = jax.process_index()
    step, weights = 0, np.zeros(FEATURES, np.float32)
    while step < args.steps:
        if between_steps is not None:
            between_steps(step)
        try:
            with live_devices(jax.devices()) as devices:
                step, weights = catch_up(step, weights, devices, args.path)
                x, y = data(step, args.batch * len(devices))
                loss, new = step_fn(
                    replicated(weights, devices), sharded(x, devices), sharded(y, devices), devices
                )
                loss, new = float(loss), np.asarray(new.addressable_data(0))
        except (jax.errors.JaxRuntimeError, ProcessFailureError) as e:
            # A process failed in the block: every live one raises, and tries again.
            print(f"process {me}: step {step} failed: {str(e).splitlines()[0][:300]}", flush=True)
            time.sleep(max(args.pause, 0.5))
            continue
        report = {
            "step": step,
            "devices": len(devices),
            "loss": loss,
            "weights": new.tobytes().hex(),
        }
        print(json.dumps(report), flush=True)
        step, weights = step + 1, new
        time.sleep(args.pause)
    return weights


def calls_made() -> dict:
    """This process's jax_accl calls by collective, and XLA's own that jax_accl ran."""
    stats = jax_accl.stats()
    return {
        "jax_accl": {name: c["calls"] for name, c in stats["collectives"].items()},
        "xla_on_jax_accl": {name: c["calls"] for name, c in stats["xla_collectives"].items()},
    }


def main(argv=None):
    args = parse_args(argv)
    join(args)
    print(f"process {jax.process_index()}: joined jax.distributed", flush=True)
    train(args, make_step(args.path))
    print(f"process {jax.process_index()}: calls {json.dumps(calls_made())}", flush=True)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
