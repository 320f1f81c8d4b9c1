"""One process of a job (or a one-process run on 8 devices) whose programs use one
helper holding a jax_accl call twice, as real programs do: a jitted or rematerialized
(`jax.checkpoint`) reduction applied to two independent arrays of the same shape, and
a stack of identical FSDP-style blocks under `jax.checkpoint` (each block's weights
gathered, independently of the others), differentiated. JAX lowers each such helper
once and calls it from every use unless jax_accl prevents it
(jax_accl/primitives/lanes.py); the uses then shared one lane, and across processes
one process's first use was reduced with another's second (results 201 and 102 where
3 and 300 are right).

Every result is checked exactly against what it must be (integers, bitwise), with and
without a delay before one of the two uses on one rank (so that the uses reach the
runtime in different orders on different ranks); the blocks' loss and gradients against
the same program on jax.lax. Prints "RESULT <json>".

    python -m jax_accl.testing.reuse_worker --process-id 0 --num-processes 2 ...
    python -m jax_accl.testing.reuse_worker --single   # one process, 8 devices
"""

from __future__ import annotations

import argparse
import json
import os
import time

HELPERS = ("jit", "checkpoint")


def _delay_on_rank0(x, index, seconds):
    """x, after `seconds` on the rank whose index is 0 (a host callback that x then
    depends on): that rank reaches the call taking it later than the others."""
    import jax
    import numpy as np

    def wait(i):
        if int(np.asarray(i).reshape(-1)[0]) == 0:
            time.sleep(seconds)
        return np.zeros((), x.dtype)

    return x + jax.pure_callback(wait, jax.ShapeDtypeStruct((), x.dtype), index)


def helper_twice(mesh, helper: str, delay_s: float):
    """A program reducing `a` and `b` (int32) with one helper used twice; on rank 0 `a`
    reaches its use `delay_s` late."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    import jax_accl

    def reduce(v):
        return jax_accl.psum(v, "x")

    red = jax.jit(reduce) if helper == "jit" else jax.checkpoint(reduce)

    def body(a, b):
        if delay_s:
            a = _delay_on_rank0(a, jax.lax.axis_index("x"), delay_s)
        # Compute beside the calls: XLA:CPU runs a program of a few thunks in order,
        # one of more (and of buffers that are not tiny) as its data flow allows.
        m = jnp.full((64, 64), 0.01, jnp.float32)
        for _ in range(6):
            m = jnp.tanh(m @ m)
        return red(a), red(b), m

    specs = dict(in_specs=(P("x"), P("x")), out_specs=(P(), P(), P()))
    return jax.jit(jax.shard_map(body, mesh=mesh, **specs))


def check_helpers(mesh, iterations: int) -> dict:
    """Each helper, without and with a delay: `iterations` launches, each result exact."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    n = mesh.size
    sharding = NamedSharding(mesh, P("x"))
    rows = np.arange(n, dtype=np.int32)[:, None] * np.ones((1, 1 << 16), np.int32)
    a_host, b_host = rows + 1, 100 * (rows + 1)
    a = jax.make_array_from_callback(a_host.shape, sharding, lambda i: a_host[i])
    b = jax.make_array_from_callback(b_host.shape, sharding, lambda i: b_host[i])
    want_a, want_b = a_host.sum(0), b_host.sum(0)
    checked = {}
    for helper in HELPERS:
        for delay_s in (0.0, 0.003):
            program = helper_twice(mesh, helper, delay_s)
            for k in range(iterations):
                got_a, got_b, _ = program(a, b)
                got_a = np.asarray(got_a.addressable_shards[0].data).reshape(-1)
                got_b = np.asarray(got_b.addressable_shards[0].data).reshape(-1)
                if not (np.array_equal(got_a, want_a) and np.array_equal(got_b, want_b)):
                    raise AssertionError(
                        f"{helper} helper used twice (delay {delay_s} s), launch {k}: got "
                        f"{got_a[0]} and {got_b[0]}, want {want_a[0]} and {want_b[0]}"
                    )
            checked[f"{helper}/{delay_s}"] = iterations
    return checked


def fsdp_blocks(mesh, lib_shard_map, blocks: int):
    """Loss and gradients of a stack of identical blocks under jax.checkpoint, each
    block's weight sharded along "x" on its rows and gathered whole in the block
    (independently of the activations), the loss averaged over the batch shards; the
    collectives written with jax.lax, carried by `lib_shard_map`'s routing."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    @jax.checkpoint
    def block(w_shard, h):
        w = jax.lax.all_gather(w_shard, "x", tiled=True)
        return jnp.tanh(h @ w)

    def loss(ws, x):
        h = x
        for w in ws:
            h = block(w, h)
        return jax.lax.pmean(jnp.mean(h**2), "x")

    def step(ws, x):
        return jax.value_and_grad(loss)(ws, x)

    specs = dict(in_specs=([P("x")] * blocks, P("x")), out_specs=(P(), [P("x")] * blocks))
    return jax.jit(lib_shard_map(step, mesh=mesh, **specs))


def check_fsdp(mesh, iterations: int, blocks: int = 4, width: int = 256) -> dict:
    """The blocks' loss and gradients on jax_accl against jax.lax's; the compiled step
    holds no XLA collective and one jax_accl call per use."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import jax_accl

    n = mesh.size
    rng = np.random.default_rng(0)
    ws_host = [rng.standard_normal((width, width)).astype(np.float32) / 8 for _ in range(blocks)]
    x_host = rng.standard_normal((4 * n, width)).astype(np.float32)
    sharding = NamedSharding(mesh, P("x"))

    def put(v):
        return jax.make_array_from_callback(v.shape, sharding, lambda i: v[i])

    ws, x = [put(w) for w in ws_host], put(x_host)
    ours = fsdp_blocks(mesh, jax_accl.shard_map, blocks)
    theirs = fsdp_blocks(mesh, jax.shard_map, blocks)
    held = jax_accl.collectives(ours, ws, x)
    if held["xla"]:
        raise AssertionError(f"the routed step still holds XLA collectives: {held}")
    for _ in range(iterations):
        (loss, grads), (loss_ref, grads_ref) = ours(ws, x), theirs(ws, x)
        np.testing.assert_allclose(np.asarray(loss), np.asarray(loss_ref), rtol=1e-5)
        for g, r in zip(grads, grads_ref):
            for s, t in zip(g.addressable_shards, r.addressable_shards):
                np.testing.assert_allclose(
                    np.asarray(s.data), np.asarray(t.data), rtol=2e-5, atol=1e-6
                )
    return {"calls": held["jax_accl"], "loss": float(loss)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--single", action="store_true", help="one process, 8 devices")
    parser.add_argument("--process-id", type=int)
    parser.add_argument("--num-processes", type=int)
    parser.add_argument("--coordinator")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--gloo-interface", default="", help="namespaced hosts: gloo's rail")
    args = parser.parse_args()
    import jax

    if args.single:
        jax.config.update("jax_num_cpu_devices", 8)
    else:
        jax.config.update("jax_num_cpu_devices", args.devices)
        jax.distributed.initialize(
            coordinator_address=args.coordinator,
            num_processes=args.num_processes,
            process_id=args.process_id,
            initialization_timeout=60,
        )
        if args.gloo_interface:  # the reference's collectives, on the hosts' own rail
            from jax_accl import _compat

            _compat.use_gloo_on_interface(args.gloo_interface)
    import numpy as np
    from jax.sharding import Mesh

    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    mesh = Mesh(np.array(devices), ("x",))
    started = time.monotonic()
    result = {
        "fsdp": check_fsdp(mesh, max(1, args.iterations // 5)),
        "helpers": check_helpers(mesh, args.iterations),
        "seconds": round(time.monotonic() - started, 1),
        "process": jax.process_index(),
    }
    if not args.single:
        jax.distributed.shutdown()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    main()
