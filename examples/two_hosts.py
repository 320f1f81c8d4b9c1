"""Data-parallel training across hosts on jax_accl: the quick start of the README.

One process per host (or several), each with --devices CPU devices; every all-reduce of
the step (the gradients' and the loss's) is jax_accl's, over every rail between hosts.
After training, each process prints its loss, what the compiled step holds and the bytes
each transport (each rail) carried. Run it on every host, e.g. on two hosts with rails
eth1 and eth2 (10.0.0.1 is host 0's address, port 8476 open between the hosts):

    host 0:  JAX_ACCL_RAILS=eth1,eth2 python two_hosts.py --coordinator 10.0.0.1:8476 \\
                 --num-processes 2 --process-id 0
    host 1:  JAX_ACCL_RAILS=eth1,eth2 python two_hosts.py --coordinator 10.0.0.1:8476 \\
                 --num-processes 2 --process-id 1

or under a launcher, where jax.distributed finds the rest itself:

    mpirun -np 2 -H node1,node2 -x JAX_ACCL_RAILS=eth1,eth2 python two_hosts.py
    srun --nodes=2 --ntasks-per-node=1 --export=ALL,JAX_ACCL_RAILS=eth1,eth2 python two_hosts.py

Behind a firewall, open the coordinator's port and give jax_accl's listeners a range:
JAX_ACCL_PORTS=40000-40100.
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import PartitionSpec as P

import jax_accl


def init_params(key, sizes):
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--coordinator", help="host:port of process 0 (omit under mpirun/srun)")
    parser.add_argument("--num-processes", type=int)
    parser.add_argument("--process-id", type=int)
    parser.add_argument("--devices", type=int, default=1, help="CPU devices per process")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch", type=int, default=128, help="examples per device")
    args = parser.parse_args()

    jax.config.update("jax_num_cpu_devices", args.devices)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")  # for XLA's own, if any
    jax.distributed.initialize(args.coordinator, args.num_processes, args.process_id)

    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    optimizer = optax.adam(1e-3)

    def loss_fn(params, x, y):
        return jax.lax.pmean(local_loss(params, x, y), "data")

    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    specs = dict(mesh=mesh, in_specs=(P(), P(), P("data"), P("data")), out_specs=(P(), P(), P()))
    train_step = jax.jit(jax_accl.shard_map(step, **specs))

    # A learnable task: the class is which of 8 fixed directions x points most along.
    sizes = [64, 512, 512, 8]
    params = init_params(jax.random.key(0), sizes)
    opt_state = optimizer.init(params)
    directions = np.random.default_rng(1).normal(size=(sizes[0], sizes[-1]))
    global_batch = args.batch * jax.device_count()
    sharding = jax.sharding.NamedSharding(mesh, P("data"))

    def batch(i):  # every process makes the global batch; each places its own shards
        x = np.random.default_rng(100 + i).normal(size=(global_batch, sizes[0]))
        x = x.astype(np.float32)
        y = np.argmax(x @ directions, axis=1).astype(np.int32)
        return tuple(
            jax.make_array_from_callback(a.shape, sharding, lambda index, a=a: a[index])
            for a in (x, y)
        )

    x, y = batch(0)
    report = jax_accl.collectives(train_step, params, opt_state, x, y)
    jax_accl.reset_stats()
    losses = []
    for i in range(args.steps):
        x, y = batch(i)
        params, opt_state, loss = train_step(params, opt_state, x, y)
        losses.append(float(loss))  # a failed all-reduce raises here (see the README)
    me = jax.process_index()
    print(f"process {me}: loss {losses[0]:.4f} -> {losses[-1]:.4f} in {args.steps} steps")
    print(f"process {me}: the step's collectives: {report}")
    transports = jax_accl.stats()["transports"]
    print(f"process {me}: bytes sent per transport: ", end="")
    print({name: t["bytes_sent"] for name, t in sorted(transports.items())})
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
