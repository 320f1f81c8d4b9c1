"""Where a training step's time goes: the step (jax_accl's, and the same over XLA's
all-reduce), its compute alone (the same step with no gradient reduction) and its
communication alone (the all-reduce of a gradient-shaped pytree), each the median of
calls that all processes start together (after a barrier)."""

from __future__ import annotations

import numpy as np

from jax_accl.bench.timing import median_seconds_in_step


def _median_seconds(call, reps: int) -> float:
    return median_seconds_in_step(call, reps, 3, "jax_accl.demo.breakdown")


def _compute_only_step(mesh, optimizer, loss_fn):
    """The step with local gradients: no collective at all (checked by the caller)."""
    import jax
    import optax
    from jax.sharding import PartitionSpec as P

    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return jax.jit(
        jax.shard_map(
            step,
            mesh=mesh,
            in_specs=(P(), P(), P("data"), P("data")),
            out_specs=(P(), P(), P()),
            check_vma=False,
        )
    )


def _communication_only(mesh, psum, shard_map):
    """The all-reduce of a pytree shaped like the gradients, last layer first (the order
    autodiff produces them in), `psum` per leaf under `shard_map`."""
    import jax
    from jax.sharding import PartitionSpec as P

    def reduce(tree):
        leaves, treedef = jax.tree.flatten(tree)
        out = [psum(leaf, "data") for leaf in reversed(leaves)]
        return jax.tree.unflatten(treedef, list(reversed(out)))

    return jax.jit(shard_map(reduce, mesh=mesh, in_specs=P(), out_specs=P(), check_vma=False))


def measure(mesh, build_step, loss_fn, optimizer, params, opt_state, x, y, reps: int) -> dict:
    """{name: seconds} for the steps, the compute alone and the communication alone."""
    import jax

    import jax_accl

    steps = {v: build_step(mesh, optimizer, v, donate=False) for v in ("jax_accl", "jax.lax")}
    compute = _compute_only_step(mesh, optimizer, loss_fn)
    # On the mesh before timing, replicated as the steps take them: host arrays would be
    # sharded anew in every timed call (about 4.7 MiB, 10 ms a step here).
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    zeros = jax.device_put(jax.tree.map(np.zeros_like, params), replicated)
    params, opt_state = jax.device_put((params, opt_state), replicated)
    text = compute.lower(params, opt_state, x, y).compile().as_text()
    if "all-reduce(" in text or "accl_allreduce" in text:
        raise AssertionError("the compute-only step still communicates")
    out = {}
    for variant, step in steps.items():
        out[f"step {variant}"] = _median_seconds(lambda s=step: s(params, opt_state, x, y), reps)
    out["compute alone"] = _median_seconds(lambda: compute(params, opt_state, x, y), reps)
    libraries = (
        ("jax_accl", jax_accl.psum, jax_accl.shard_map),
        ("jax.lax", jax.lax.psum, jax.shard_map),
    )
    for name, psum, shard_map in libraries:
        program = _communication_only(mesh, psum, shard_map)
        out[f"communication {name}"] = _median_seconds(lambda p=program: p(zeros), reps)
    return out


def report(seconds: dict) -> list[str]:
    """The table: each library's step against compute alone, communication alone, their
    sum and their maximum."""
    lines = [
        "                 step  compute   comm.     sum     max  step/max  vs jax.lax step",
    ]
    compute = seconds["compute alone"]
    base = seconds["step jax.lax"]
    for name in ("jax_accl", "jax.lax"):
        step, comm = seconds[f"step {name}"], seconds[f"communication {name}"]
        lines.append(
            f"  {name:<10} {step * 1e3:7.2f} {compute * 1e3:8.2f} {comm * 1e3:7.2f} "
            f"{(compute + comm) * 1e3:7.2f} {max(compute, comm) * 1e3:7.2f} "
            f"{step / max(compute, comm):8.2f}x {base / step:10.2f}x   (ms)"
        )
    return lines
