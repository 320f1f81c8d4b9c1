"""One process of a job (or a one-process run on 8 devices) whose programs use one
helper holding a jax_accl call twice, as real programs do: a jitted or rematerialized
(`jax.checkpoint`) collective (a psum, an all_to_all, a ragged_all_to_all, a broadcast) applied to
two independent sets of arrays, and a stack of identical FSDP-style blocks under
`jax.checkpoint` (each block's weights gathered, independently of the others),
differentiated. JAX lowers each such helper once and calls it from every use unless
jax_accl prevents it (jax_accl/primitives/lanes.py); the uses then shared one lane, and
across processes one process's first use was reduced with another's second (results
201 and 102 where 3 and 300 are right).

Every result is checked exactly against what it must be (integers, bitwise: the sums,
jax.lax.all_to_all's program, the NumPy reference of jax.lax.ragged_all_to_all), with
and without a delay before one use on the first rank and the other on the last (so that
the uses reach the runtime in different orders on different ranks); the blocks' loss
and gradients against the same program on jax.lax. Prints "RESULT <json>".

    python -m jax_accl.testing.reuse_worker --process-id 0 --num-processes 2 ...
    python -m jax_accl.testing.reuse_worker --single   # one process, 8 devices
"""

from __future__ import annotations

import argparse
import json
import os
import time

HELPERS = ("jit", "checkpoint")
# The collectives a helper holds: an all-reduce, an all-to-all, a ragged all-to-all, a
# broadcast from a root.
OPS = ("psum", "all_to_all", "ragged", "broadcast")
DELAYS = (0.0, 0.003)
BROADCAST_ROOT = 1


def checked_keys(iterations: int) -> dict:
    """What check_helpers returns when every launch was exact."""
    return {f"{op}/{h}/{d}": iterations for op in OPS for h in HELPERS for d in DELAYS}


def _delay_on_rank(x, index, seconds, rank):
    """x, after `seconds` on the rank whose index is `rank` (a host callback that x then
    depends on): that rank reaches the call taking it later than the others."""
    import jax
    import numpy as np

    def wait(i):
        if int(np.asarray(i).reshape(-1)[0]) == rank:
            time.sleep(seconds)
        return np.zeros((), x.dtype)

    return x + jax.pure_callback(wait, jax.ShapeDtypeStruct((), x.dtype), index)


def _collective(op: str, lib):
    """The helper's body: `op` over "x" with `lib` (jax_accl, or jax.lax for the
    reference), on one operand (psum, all_to_all) or an operand, an output and its four
    layout arrays (ragged)."""
    if op == "psum":
        return lambda v: lib.psum(v, "x")
    if op == "all_to_all":
        return lambda v: lib.all_to_all(v, "x", 0, 0, tiled=True)
    if op == "broadcast":  # (jax_accl's alone: its reference is NumPy's)
        return lambda v: lib.broadcast(v, "x", BROADCAST_ROOT)

    def ragged(operand, output, *sizes):
        return lib.ragged_all_to_all(operand, output, *sizes, axis_name="x")

    return ragged


def helper_twice(mesh, helper: str, delay_s: float, op: str = "psum", lib=None):
    """A program applying one helper holding `op` to two independent sets of arguments
    `a` and `b` (int32); on rank 0 `a`, on the last rank `b` reaches its use `delay_s`
    late (so that, whatever order XLA gives the two calls, the ranks start them in
    different orders). `lib`: whose collective the helper calls (jax_accl by default;
    jax.lax for a reference)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    import jax_accl

    call = _collective(op, jax_accl if lib is None else lib)
    red = jax.jit(call) if helper == "jit" else jax.checkpoint(call)
    arity = 6 if op == "ragged" else 1  # arrays per use

    def body(*args):
        a, b = list(args[:arity]), list(args[arity:])
        if op == "ragged":  # this device's block of each (the leading axis is the mesh's)
            a, b = [v[0] for v in a], [v[0] for v in b]
        if delay_s:
            index = jax.lax.axis_index("x")
            a[0] = _delay_on_rank(a[0], index, delay_s, 0)
            b[0] = _delay_on_rank(b[0], index, delay_s, mesh.size - 1)
        # Compute beside the calls: XLA:CPU runs a program of a few thunks in order,
        # one of more (and of buffers that are not tiny) as its data flow allows.
        m = jnp.full((64, 64), 0.01, jnp.float32)
        for _ in range(6):
            m = jnp.tanh(m @ m)
        got_a, got_b = red(*a), red(*b)
        if op == "ragged":
            got_a, got_b = got_a[None], got_b[None]
        return got_a, got_b, m

    out = P() if op == "psum" else P("x")
    specs = dict(in_specs=(P("x"),) * (2 * arity), out_specs=(out, out, P()))
    return jax.jit(jax.shard_map(body, mesh=mesh, **specs))


def _inputs(mesh, op: str):
    """(a, b, what a program of `op` must return for each, or None where the reference
    is jax.lax's own program): host arrays, int32, each device's rows distinct."""
    import numpy as np

    from jax_accl.testing import ragged

    n = mesh.size
    if op == "psum":
        rows = np.arange(n, dtype=np.int32)[:, None] * np.ones((1, 1 << 16), np.int32)
        a, b = rows + 1, 100 * (rows + 1)
        return [a], [b], (a.sum(0, keepdims=True), b.sum(0, keepdims=True))
    if op == "broadcast":  # every device gets the root's rows
        rows = np.arange(n, dtype=np.int32)[:, None] * np.ones((1, 1 << 12), np.int32)
        a, b = rows + 1, 100 * (rows + 1)
        root = slice(BROADCAST_ROOT, BROADCAST_ROOT + 1)
        return [a], [b], (np.broadcast_to(a[root], a.shape), np.broadcast_to(b[root], b.shape))
    if op == "all_to_all":  # each device's (n blocks of 4 rows) x 256
        shape = (n * n * 4, 256)
        a = np.arange(np.prod(shape), dtype=np.int32).reshape(shape)
        return [a], [-3 * a - 7], None
    uses = []
    for seed in (0, 1):  # two layouts: the uses' sizes differ too
        sizes = ragged.layout(n, seed, per_peer=2)
        operand = np.arange(n * 24 * 8, dtype=np.int32).reshape(n, 24, 8) * (seed + 1) + 1
        output = np.full((n, 30, 8), -1 - seed, np.int32)
        uses.append(([operand, output, *sizes], ragged.reference(operand, output, *sizes)))
    return uses[0][0], uses[1][0], (uses[0][1], uses[1][1])


def _local(result, whole=None):
    """This process's shards of `result` (and of `whole`, the global array a result must
    equal) as lists of host arrays."""
    import numpy as np

    got = [np.asarray(s.data) for s in result.addressable_shards]
    if whole is None:
        return got
    return got, [np.asarray(whole[s.index]) for s in result.addressable_shards]


def check_helpers(mesh, iterations: int, ops=OPS) -> dict:
    """Each op's helper, jitted and checkpointed, without and with a delay: `iterations`
    launches, each result exact (bitwise): a psum against the sums, an all_to_all
    against the same program on jax.lax.all_to_all, a ragged all-to-all against the
    NumPy reference of jax.lax.ragged_all_to_all's semantics (XLA:CPU has none)."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    sharding = NamedSharding(mesh, P("x"))

    def put(v):
        return jax.make_array_from_callback(v.shape, sharding, lambda i: v[i])

    checked = {}
    for op in ops:
        a_host, b_host, wants = _inputs(mesh, op)
        args = [put(v) for v in (*a_host, *b_host)]
        for helper in HELPERS:
            for delay_s in DELAYS:
                program = helper_twice(mesh, helper, delay_s, op)
                if wants is None:  # jax.lax's program on the same arrays, once
                    ref = helper_twice(mesh, helper, 0.0, op, lib=jax.lax)(*args)
                    want = [_local(r) for r in ref[:2]]
                for k in range(iterations):
                    got = program(*args)
                    for use, result in zip("ab", got[:2]):
                        if wants is None:
                            mine, theirs = _local(result), want["ab".index(use)]
                        else:
                            mine, theirs = _local(result, wants["ab".index(use)])
                        for g, w in zip(mine, theirs):
                            if not np.array_equal(g, w):
                                bad = np.argwhere(g != w)[0]
                                raise AssertionError(
                                    f"{op} in a {helper} helper used twice (delay {delay_s} "
                                    f"s), launch {k}, use {use!r}: got {g[tuple(bad)]} at "
                                    f"{tuple(bad)}, want {w[tuple(bad)]}"
                                )
                checked[f"{op}/{helper}/{delay_s}"] = iterations
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
