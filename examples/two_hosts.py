"""Data-parallel training across hosts on jax_accl: the quick start of the README.

One process per host (or several), each with --devices CPU devices; every all-reduce of
the step (the gradients' and the loss's) is jax_accl's, over every rail between hosts.
After training, each process prints its loss, what the compiled step holds and the bytes
each transport (each rail) carried. Install jax_accl with the demo extra (optax) on every
host, `pip install ".[demo]"` from a checkout, then run this file on every host, e.g. on
two hosts with rails eth1 and eth2 (10.0.0.1 is host 0's address, port 8476 open between
the hosts):

    host 0:  JAX_ACCL_RAILS=eth1,eth2 python two_hosts.py --coordinator 10.0.0.1:8476 \\
                 --num-processes 2 --process-id 0
    host 1:  JAX_ACCL_RAILS=eth1,eth2 python two_hosts.py --coordinator 10.0.0.1:8476 \\
                 --num-processes 2 --process-id 1

or under a launcher, where jax.distributed finds the rest itself:

    mpirun -np 2 -H node1,node2 -x JAX_ACCL_RAILS=eth1,eth2 python two_hosts.py
    srun --nodes=2 --ntasks-per-node=1 --export=ALL,JAX_ACCL_RAILS=eth1,eth2 python two_hosts.py

Behind a firewall, open the coordinator's port and give jax_accl's listeners a range:
JAX_ACCL_PORTS=40000-40100.

The training loop (train) is the README's "When a call fails": it keeps a host copy of
the parameters and optimizer state every --checkpoint-every steps and, when a step
fails (a peer late beyond JAX_ACCL_TIMEOUT_S, a call aborted), goes back to that copy
and, after jax_accl.recover() (every process's calls count the same steps again, and
every process resumes from the same step), runs the steps from there again.
tests/multiprocess/test_checkpoint_retry.py runs it with a step that fails.
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax_accl

FEATURES, CLASSES = 64, 8  # the task: 8 classes of 64-dimensional points


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="python two_hosts.py", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--coordinator", help="host:port of process 0 (omit under mpirun/srun)")
    parser.add_argument("--num-processes", type=int)
    parser.add_argument("--process-id", type=int)
    parser.add_argument("--devices", type=int, default=1, help="CPU devices per process")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch", type=int, default=128, help="examples per device")
    parser.add_argument("--width", type=int, default=512, help="the MLP's two hidden layers")
    parser.add_argument(
        "--checkpoint-every", type=int, default=10, help="steps between host copies of the state"
    )
    return parser.parse_args(argv)


def join(args):
    """This process's CPU devices, and the job joined through jax.distributed."""
    jax.config.update("jax_num_cpu_devices", args.devices)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")  # for XLA's own, if any
    jax.distributed.initialize(args.coordinator, args.num_processes, args.process_id)
    return jax.make_mesh((jax.device_count(),), ("data",))


def init_params(key, width):
    sizes = [FEATURES, width, width, CLASSES]
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        key, sub = jax.random.split(key)
        w = jax.random.normal(sub, (fan_in, fan_out), jnp.float32) * np.sqrt(2.0 / fan_in)
        params.append({"w": w, "b": jnp.zeros(fan_out, jnp.float32)})
    return params


def local_loss(params, x, y):
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    logits = x @ params[-1]["w"] + params[-1]["b"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def make_train_step(mesh, optimizer):
    """The README's step: jax.lax inside, jax_accl.shard_map around it; params and
    opt_state donated (their buffers are reused for the results)."""

    def loss_fn(params, x, y):
        return jax.lax.pmean(local_loss(params, x, y), "data")

    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    specs = dict(mesh=mesh, in_specs=(P(), P(), P("data"), P("data")), out_specs=(P(), P(), P()))
    return jax.jit(jax_accl.shard_map(step, **specs), donate_argnums=(0, 1))


def make_batches(mesh, per_device):
    """batch(i): step i's global batch (the same on every process), each process placing
    its own shards. A learnable task: the class is which of 8 fixed directions x points
    most along."""
    directions = np.random.default_rng(1).normal(size=(FEATURES, CLASSES))
    global_batch = per_device * jax.device_count()
    sharding = NamedSharding(mesh, P("data"))

    def batch(i):
        x = np.random.default_rng(100 + i).normal(size=(global_batch, FEATURES))
        x = x.astype(np.float32)
        y = np.argmax(x @ directions, axis=1).astype(np.int32)
        return tuple(
            jax.make_array_from_callback(a.shape, sharding, lambda index, a=a: a[index])
            for a in (x, y)
        )

    return batch


def placer(mesh):
    """place(tree): host arrays, the same on every process, replicated on the mesh. Each
    process places its own copies (jax.device_put would first check with every other
    process that they are equal: a collective, which a peer still failing cannot join)."""
    replicated = NamedSharding(mesh, P())

    def put(a):
        a = np.asarray(a)
        return jax.make_array_from_callback(a.shape, replicated, lambda index: a[index])

    return lambda tree: jax.tree.map(put, tree)


def train(train_step, params, opt_state, batch, steps, place, checkpoint_every=10, retries=3):
    """Trains `steps` steps, going back to the last host copy of the state when a step
    fails (at most `retries` times in a row). `place` puts host arrays back on the mesh.
    Returns params, opt_state, the losses of the steps kept and how many steps failed."""
    me = jax.process_index()
    step, checkpoint, losses, failures, in_a_row = 0, None, [], 0, 0
    while step < steps:
        try:
            if step % checkpoint_every == 0:  # before the step, which donates both
                checkpoint = step, jax.device_get((params, opt_state))
            params, opt_state, loss = train_step(params, opt_state, *batch(step))
            losses.append(float(loss))  # a failed call raises here, not at the call
            step, in_a_row = step + 1, 0
        except jax.errors.JaxRuntimeError as e:
            # The failed step's params and opt_state were donated: they are gone. Every
            # process of the job raised for this step too; the next call starts afresh.
            failures, in_a_row = failures + 1, in_a_row + 1
            if in_a_row > retries or "restart the job" in str(e):  # e.g. a dead peer
                raise
            step, host_state = checkpoint
            # Every process: their calls count the same steps again, and they all resume
            # from this step (else it raises: restart the job).
            jax_accl.recover(resume_from=step)
            print(f"process {me}: step failed, again from step {step}: {str(e).splitlines()[0]}")
            params, opt_state = place(host_state)
            del losses[step:]
    return params, opt_state, losses, failures


def main(argv=None):
    args = parse_args(argv)
    mesh = join(args)
    optimizer = optax.adam(1e-3)
    train_step = make_train_step(mesh, optimizer)
    place = placer(mesh)
    params = place(init_params(jax.random.key(0), args.width))
    opt_state = place(optimizer.init(params))
    batch = make_batches(mesh, args.batch)

    report = jax_accl.collectives(train_step, params, opt_state, *batch(0))
    jax_accl.reset_stats()
    params, opt_state, losses, failures = train(
        train_step, params, opt_state, batch, args.steps, place, args.checkpoint_every
    )
    me = jax.process_index()
    print(f"process {me}: loss {losses[0]:.4f} -> {losses[-1]:.4f} in {args.steps} steps")
    if failures:
        print(f"process {me}: {failures} failed steps, each run again from a checkpoint")
    print(f"process {me}: the step's collectives: {report}")
    transports = jax_accl.stats()["transports"]
    print(f"process {me}: bytes sent per transport: ", end="")
    print({name: t["bytes_sent"] for name, t in sorted(transports.items())})
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
