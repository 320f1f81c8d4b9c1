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
* ``pp``: pipeline parallel (GPipe) on a ("data", "stage") mesh of 4 stages: stage s
  holds layer s alone (the layers zero-padded to one width and stacked, split along
  "stage"; the padding stays zero, its gradients are zero). Each device's batch enters
  stage 0 as 4 microbatches; every time step each stage applies its layer and passes
  the activation on by ppermute (whose transpose carries the gradients back); the loss
  is taken where microbatches leave the last stage. The gradients are all-reduced along
  "data".

Every strategy's step computes what the data-parallel step computes, to float rounding.
"""

from __future__ import annotations

import numpy as np

STRATEGIES = ("dp", "fsdp", "tp", "pp")
MODEL_AXIS_SIZE = 2  # "model" of tp: devices that split each weight
PIPELINE_STAGES = 4  # "stage" of pp: one layer each
MICROBATCHES = 4  # of each device's batch, in pp


def mesh_for(devices, strategy: str):
    from jax.sharding import Mesh

    devices = np.array(devices)
    if strategy not in ("tp", "pp"):
        return Mesh(devices, ("data",))
    inner, axis = (MODEL_AXIS_SIZE, "model") if strategy == "tp" else (PIPELINE_STAGES, "stage")
    if devices.size % inner:
        raise ValueError(
            f"jax_accl.demo: --strategy {strategy} needs a device count divisible by "
            f"{inner}, got {devices.size}"
        )
    return Mesh(devices.reshape(-1, inner), ("data", axis))


def batch_spec(strategy: str):
    from jax.sharding import PartitionSpec as P

    return P(("data", "model")) if strategy == "tp" else P("data")


def param_specs(strategy: str, layers: int) -> list:
    from jax.sharding import PartitionSpec as P

    if strategy == "dp":
        return [{"w": P(), "b": P()} for _ in range(layers)]
    if strategy == "fsdp":
        return [{"w": P("data"), "b": P("data")} for _ in range(layers)]
    if strategy == "pp":
        if layers != PIPELINE_STAGES:
            raise ValueError(f"jax_accl.demo: --strategy pp needs {PIPELINE_STAGES} layers")
        return {"w": P("stage"), "b": P("stage")}
    if layers % 2:
        raise ValueError("jax_accl.demo: --strategy tp pairs the layers; their count must be even")
    column, row = {"w": P(None, "model"), "b": P("model")}, {"w": P("model", None), "b": P()}
    return [column if i % 2 == 0 else row for i in range(layers)]


def opt_state_specs(param_spec: list):
    """adam's state: the step count replicated, both moments laid out as the params."""
    import optax
    from jax.sharding import PartitionSpec as P

    return (optax.ScaleByAdamState(count=P(), mu=param_spec, nu=param_spec), optax.EmptyState())


def global_loss(strategy: str, loss_fn, logits_loss, classes: int):
    """The loss averaged over the global batch, written with jax.lax's collectives.
    loss_fn(params, x, y) is the model's local loss; logits_loss(logits, y) its head,
    over `classes` logits."""
    import jax

    if strategy == "dp":
        return lambda params, x, y: jax.lax.pmean(loss_fn(params, x, y), "data")
    if strategy == "fsdp":

        def fsdp(params, x, y):
            whole = jax.tree.map(lambda p: jax.lax.all_gather(p, "data", tiled=True), params)
            return jax.lax.pmean(loss_fn(whole, x, y), "data")

        return fsdp

    if strategy == "pp":
        return lambda params, x, y: jax.lax.pmean(
            pp_loss(params, x, y, logits_loss, classes), "data"
        )

    def tp(params, x, y):
        return jax.lax.pmean(logits_loss(tp_forward(params, x), y), ("data", "model"))

    return tp


def pp_loss(stage_params, x, y, logits_loss, classes: int):
    """This device's loss under the GPipe schedule (see the module doc): time step t feeds
    microbatch t to stage 0; microbatch m leaves the last stage at t = m + stages - 1.
    Stages that hold no microbatch at a time step compute on zeros, masked out."""
    import jax
    import jax.numpy as jnp

    last = PIPELINE_STAGES - 1
    s = jax.lax.axis_index("stage")
    w, b = stage_params["w"][0], stage_params["b"][0]
    width = w.shape[0]
    micro = jnp.pad(x, ((0, 0), (0, width - x.shape[1]))).reshape(MICROBATCHES, -1, width)
    labels = y.reshape(MICROBATCHES, -1)
    onward = [(i, i + 1) for i in range(last)]  # the last stage's output goes nowhere
    state, total = jnp.zeros_like(micro[0]), 0.0
    for t in range(MICROBATCHES + last):
        state = jnp.where(s == 0, micro[min(t, MICROBATCHES - 1)], state)
        h = state @ w + b
        state = jnp.where(s == last, h, jax.nn.relu(h))
        if t >= last:
            leaving = logits_loss(state[:, :classes], labels[t - last])
            total = total + jnp.where(s == last, leaving, 0.0)
        if t < MICROBATCHES + last - 1:
            state = jax.lax.ppermute(state, "stage", onward)
    return jax.lax.psum(total, "stage") / MICROBATCHES


def stacked_layers(layers: list) -> dict:
    """pp's parameters: the layers zero-padded to the widest and stacked (stage s: layer
    s); `unstacked_layers` undoes it."""
    width = max(max(layer["w"].shape) for layer in layers)

    def pad(a):
        a = np.asarray(a)
        return np.pad(a, [(0, width - n) for n in a.shape])

    return {k: np.stack([pad(layer[k]) for layer in layers]) for k in ("w", "b")}


def unstacked_layers(stacked: dict, sizes) -> list:
    return [
        {"w": stacked["w"][i, :m, :n], "b": stacked["b"][i, :n]}
        for i, (m, n) in enumerate(zip(sizes[:-1], sizes[1:]))
    ]


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
