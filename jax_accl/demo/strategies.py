"""The demo's parallelism strategies: how the MLP's parameters, optimizer state and batch
are laid out on the mesh, and the global loss each one's step differentiates.

* ``dp``: data parallel. Parameters replicated (``P()``), the batch along "data"; the
  gradient all-reduce is the transpose of the implicit pvary of every parameter.
* ``fsdp``: fully sharded data parallel (ZeRO-3). Every parameter and its adam moments
  are split along "data" on dimension 0; the step all-gathers each parameter before
  use, and autodiff turns each all-gather into a reduce-scatter of its gradient.
* ``tp``: tensor (Megatron) parallel with sequence parallelism on a ("data", "model")
  mesh. Layers pair up: the first of a pair is split by columns along "model", the
  second by rows. Between pairs the batch is split along both axes; a pair all-gathers
  its rows along "model", and the row-split layer's partial products are
  reduce-scattered back. The row layers' biases are replicated, so their gradients are
  all-reduced over the whole mesh.

Every strategy's step computes what the data-parallel step computes, to float rounding.
"""

from __future__ import annotations

import numpy as np

STRATEGIES = ("dp", "fsdp", "tp")
MODEL_AXIS_SIZE = 2  # "model" of tp: devices that split each weight


def mesh_for(devices, strategy: str):
    from jax.sharding import Mesh

    devices = np.array(devices)
    if strategy != "tp":
        return Mesh(devices, ("data",))
    if devices.size % MODEL_AXIS_SIZE:
        raise ValueError(
            f"jax_accl.demo: --strategy tp needs a device count divisible by "
            f"{MODEL_AXIS_SIZE}, got {devices.size}"
        )
    return Mesh(devices.reshape(-1, MODEL_AXIS_SIZE), ("data", "model"))


def batch_spec(strategy: str):
    from jax.sharding import PartitionSpec as P

    return P(("data", "model")) if strategy == "tp" else P("data")


def param_specs(strategy: str, layers: int) -> list:
    from jax.sharding import PartitionSpec as P

    if strategy == "dp":
        return [{"w": P(), "b": P()} for _ in range(layers)]
    if strategy == "fsdp":
        return [{"w": P("data"), "b": P("data")} for _ in range(layers)]
    if layers % 2:
        raise ValueError("jax_accl.demo: --strategy tp pairs the layers; their count must be even")
    column, row = {"w": P(None, "model"), "b": P("model")}, {"w": P("model", None), "b": P()}
    return [column if i % 2 == 0 else row for i in range(layers)]


def opt_state_specs(param_spec: list):
    """adam's state: the step count replicated, both moments laid out as the params."""
    import optax
    from jax.sharding import PartitionSpec as P

    return (optax.ScaleByAdamState(count=P(), mu=param_spec, nu=param_spec), optax.EmptyState())


def global_loss(strategy: str, loss_fn, logits_loss):
    """The loss averaged over the global batch, written with jax.lax's collectives.
    loss_fn(params, x, y) is the model's local loss; logits_loss(logits, y) its head."""
    import jax

    if strategy == "dp":
        return lambda params, x, y: jax.lax.pmean(loss_fn(params, x, y), "data")
    if strategy == "fsdp":

        def fsdp(params, x, y):
            whole = jax.tree.map(lambda p: jax.lax.all_gather(p, "data", tiled=True), params)
            return jax.lax.pmean(loss_fn(whole, x, y), "data")

        return fsdp

    def tp(params, x, y):
        return jax.lax.pmean(logits_loss(tp_forward(params, x), y), ("data", "model"))

    return tp


def tp_forward(params, x):
    """The MLP's forward pass, column- then row-split layer pairs (see module doc)."""
    import jax

    for i in range(0, len(params), 2):
        column, row = params[i], params[i + 1]
        rows = jax.lax.all_gather(x, "model", tiled=True)
        h = jax.nn.relu(rows @ column["w"] + column["b"])
        partial_sums = h @ row["w"]
        x = jax.lax.psum_scatter(partial_sums, "model", scatter_dimension=0, tiled=True)
        x = x + row["b"]
        if i + 2 < len(params):
            x = jax.nn.relu(x)
    return x


def place(mesh, tree, specs):
    """`tree` (the same on every process) as global arrays laid out by `specs`."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    def one(leaf, spec):
        leaf = np.asarray(leaf)
        return jax.make_array_from_callback(
            leaf.shape, NamedSharding(mesh, spec), lambda idx: leaf[idx]
        )

    return jax.tree.map(one, tree, specs, is_leaf=lambda v: isinstance(v, P))
