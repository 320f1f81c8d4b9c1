"""Sharded training steps written for jax.lax (FSDP, tensor parallel, both, pipeline),
routed: their compiled HLO holds no XLA collective, gradients included, and 3 optax
steps give jax.lax's results."""

from functools import partial

import jax
import jax.numpy as jnp
import optax
import pytest
from accl_testing import P, assert_same, put, values
from jax.sharding import NamedSharding

import jax_accl
from jax_accl.compiled import compiled_collectives

XLA_COLLECTIVES = ("all-reduce(", "reduce-scatter(", "all-gather(", "collective-permute(")


def xla_collectives(text: str) -> dict:
    return {op: text.count(op) for op in XLA_COLLECTIVES if op in text}


def accl_calls(text: str) -> set:
    return {
        t
        for t in ("accl_allreduce", "accl_reduce_scatter", "accl_all_gather", "accl_ppermute")
        if f'custom_call_target="{t}"' in text
    }


def mlp(w1, w2, x):
    return jnp.tanh(x @ w1) @ w2


# --- the strategies, each a shard_map body (params, opt_state, x, y) -> same + loss ---


def fsdp_loss(params, x, y):
    """FSDP / ZeRO-3: each device holds a slice of every weight (dim 0 along "data"),
    gathers the whole weight to use it; autodiff turns the gathers into reduce-scatters
    of the gradients."""
    w1 = jax.lax.all_gather(params["w1"], "data", tiled=True)
    w2 = jax.lax.all_gather(params["w2"], "data", tiled=True)
    return jax.lax.pmean(jnp.mean((mlp(w1, w2, x) - y) ** 2), "data")


def tp_loss(params, x, y):
    """Tensor (Megatron) parallel with sequence parallelism: the batch is sharded along
    "model" between the layers; gathered before the column-sharded w1, and the partial
    products of the row-sharded w2 reduce-scattered back."""
    x_all = jax.lax.all_gather(x, "model", tiled=True)
    h = jnp.tanh(x_all @ params["w1"])
    out = jax.lax.psum_scatter(h @ params["w2"], "model", scatter_dimension=0, tiled=True)
    return jax.lax.pmean(jnp.mean((out - y) ** 2), "model")


def fsdp_tp_loss(params, x, y):
    """Both on a 2-D mesh: weights tensor-sharded along "model" and FSDP-sharded along
    "data" on their other dimension; the batch along "data"."""
    w1 = jax.lax.all_gather(params["w1"], "data", axis=0, tiled=True)
    w2 = jax.lax.all_gather(params["w2"], "data", axis=1, tiled=True)
    out = jax.lax.psum(jnp.tanh(x @ w1) @ w2, "model")
    return jax.lax.pmean(jnp.mean((out - y) ** 2), "data")


def pipeline_loss(params, x, y, stages=4):
    """GPipe over "stage": stage s applies layer s (its slice of the stacked weights)
    and passes the activation to stage s+1 by ppermute; microbatches enter at stage 0
    and the loss is taken where they leave the last stage."""
    s = jax.lax.axis_index("stage")
    w = params["w"][0]
    micro = x.shape[0]
    state = jnp.zeros_like(x[0])
    losses = []
    shift = [(i, (i + 1) % stages) for i in range(stages)]
    for t in range(micro + stages - 1):
        feed = x[min(t, micro - 1)]
        state = jnp.where(s == 0, feed, state)
        state = jnp.tanh(state @ w)
        if t >= stages - 1:
            done = jnp.where(s == stages - 1, state, 0.0)
            losses.append(jnp.mean((done - y[t - stages + 1]) ** 2))
        state = jax.lax.ppermute(state, "stage", shift)
    return jax.lax.psum(sum(losses) / micro, "stage")


def make_body(loss_fn, optimizer):
    def body(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return body


def strategy(name):
    """(mesh shape and axes, params, their specs, x, y and their specs, loss)."""
    f32 = "float32"
    if name == "fsdp":
        mesh = ((8,), ("data",))
        params = {"w1": values((16, 24), f32, 1) * 0.3, "w2": values((24, 8), f32, 2) * 0.3}
        pspec = {"w1": P("data"), "w2": P("data")}
        xs, ys, dspec = values((32, 16), f32, 3), values((32, 8), f32, 4), P("data")
        return mesh, params, pspec, xs, ys, dspec, fsdp_loss
    if name == "tp":
        mesh = ((4,), ("model",))
        params = {"w1": values((16, 32), f32, 1) * 0.3, "w2": values((32, 16), f32, 2) * 0.3}
        pspec = {"w1": P(None, "model"), "w2": P("model", None)}
        xs, ys, dspec = values((16, 16), f32, 3), values((16, 16), f32, 4), P("model")
        return mesh, params, pspec, xs, ys, dspec, tp_loss
    if name == "fsdp_tp":
        mesh = ((2, 4), ("data", "model"))
        params = {"w1": values((16, 32), f32, 1) * 0.3, "w2": values((32, 8), f32, 2) * 0.3}
        pspec = {"w1": P("data", "model"), "w2": P("model", "data")}
        xs, ys, dspec = values((8, 16), f32, 3), values((8, 8), f32, 4), P("data")
        return mesh, params, pspec, xs, ys, dspec, fsdp_tp_loss
    assert name == "pipeline"
    mesh = ((4,), ("stage",))
    params = {"w": values((4, 8, 8), f32, 1) * 0.5}
    pspec = {"w": P("stage")}
    xs, ys, dspec = values((3, 2, 8), f32, 3), values((3, 2, 8), f32, 4), P()
    return mesh, params, pspec, xs, ys, dspec, pipeline_loss


def build(name, route: str):
    """The jitted step over the strategy's mesh; route: 'lax' (as written), 'shard_map'
    (jax_accl.shard_map) or 'patch' (jax.shard_map traced under patch_psum)."""
    (shape, axes), params, pspec, xs, ys, dspec, loss_fn = strategy(name)
    mesh = jax.make_mesh(shape, axes)
    optimizer = optax.adam(1e-2)
    # adam's moments sharded as the params are (ZeRO's sharded optimizer state)
    opt_spec = (optax.ScaleByAdamState(count=P(), mu=pspec, nu=pspec), optax.EmptyState())
    smap = jax_accl.shard_map if route == "shard_map" else jax.shard_map
    step = jax.jit(
        smap(
            make_body(loss_fn, optimizer),
            mesh=mesh,
            in_specs=(pspec, opt_spec, dspec, dspec),
            out_specs=(pspec, opt_spec, P()),
        )
    )
    params = put(mesh, params, pspec)
    opt_state = put(mesh, optimizer.init(params), opt_spec)
    return step, (params, opt_state, put(mesh, xs, dspec), put(mesh, ys, dspec))


def train(step, args, route, steps=3):
    params, opt_state, x, y = args
    losses = []
    ctx = jax_accl.patch_psum() if route == "patch" else _nothing()
    with ctx:
        for _ in range(steps):
            params, opt_state, loss = step(params, opt_state, x, y)
            losses.append(loss)
    return params, opt_state, jnp.stack(losses)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def compiled_text(step, args, route):
    ctx = jax_accl.patch_psum() if route == "patch" else _nothing()
    with ctx:
        return step.lower(*args).compile().as_text()


STRATEGIES = ["fsdp", "tp", "fsdp_tp", "pipeline"]
EXPECTED_CALLS = {
    "fsdp": {"accl_all_gather", "accl_reduce_scatter"},
    "tp": {"accl_all_gather", "accl_reduce_scatter"},
    "fsdp_tp": {"accl_all_gather", "accl_reduce_scatter", "accl_allreduce"},
    "pipeline": {"accl_ppermute"},
}


@pytest.mark.parametrize("route", ["shard_map", "patch"])
@pytest.mark.parametrize("name", STRATEGIES)
def test_routed_sharded_step_holds_no_xla_collective(name, route):
    lax_step, args = build(name, "lax")
    lax_text = compiled_text(lax_step, args, "lax")
    assert xla_collectives(lax_text), "the reference uses XLA's"
    step, args = build(name, route)
    text = compiled_text(step, args, route)
    assert xla_collectives(text) == {}, xla_collectives(text)
    for counted in (lax_text, text):  # jax_accl.collectives reads the HLO as this file does
        found = compiled_collectives(counted)
        assert {kind + "(": c["ops"] for kind, c in found["xla"].items()} == xla_collectives(
            counted
        )
        assert set(found["jax_accl"]) == accl_calls(counted)
    assert EXPECTED_CALLS[name] <= accl_calls(text), accl_calls(text)
    if name == "fsdp":  # w1's and w2's gathers fused into one call, their gradients' too
        for target in ("accl_all_gather", "accl_reduce_scatter"):
            assert text.count(f'custom_call_target="{target}"') == 1, target
    got = train(step, args, route)
    want = train(lax_step, build(name, "lax")[1], "lax")
    assert_same(got, want)


@pytest.mark.parametrize("name", ["fsdp", "pipeline"])
def test_gradient_taken_outside_the_routed_shard_map(name):
    """jax.grad of a jitted jax_accl.shard_map: the transposes (reduce-scatter of an
    all-gather, the inverse ppermute) are traced outside the routed body and still
    jax_accl's."""
    (shape, axes), params, pspec, xs, ys, dspec, loss_fn = strategy(name)
    mesh = jax.make_mesh(shape, axes)
    args = (put(mesh, params, pspec), put(mesh, xs, dspec), put(mesh, ys, dspec))

    def grad_of(smap):
        f = smap(loss_fn, mesh=mesh, in_specs=(pspec, dspec, dspec), out_specs=P())
        return jax.jit(jax.grad(f))

    routed = grad_of(jax_accl.shard_map)
    text = routed.lower(*args).compile().as_text()
    assert xla_collectives(text) == {}, xla_collectives(text)
    assert_same(routed(*args), grad_of(jax.shard_map)(*args))


@pytest.mark.parametrize("dtype", ["int32", "float64", "bfloat16"])
def test_routed_collectives_keep_every_dtype(dtype):
    mesh = jax.make_mesh((8,), ("i",))
    x = values((16, 3), dtype)

    def body(v):
        g = jax.lax.all_gather(v, "i", tiled=True)
        s = jax.lax.psum_scatter(g, "i", tiled=True)
        inv = jax.lax.all_gather(v, "i", axis=1, to="invarying")
        return s, jax.lax.ppermute(v, "i", [(i, (i + 3) % 8) for i in range(8)]), inv

    specs = dict(mesh=mesh, in_specs=P("i"), out_specs=(P("i"), P("i"), P()))
    arg = put(mesh, x, P("i"))
    routed = jax.jit(jax_accl.shard_map(body, **specs))
    text = routed.lower(arg).compile().as_text()
    assert xla_collectives(text) == {}
    assert_same(routed(arg), jax.jit(jax.shard_map(body, **specs))(arg))


def test_routing_off_leaves_jax_collectives():
    mesh = jax.make_mesh((8,), ("i",))
    f = jax.jit(
        jax.shard_map(
            partial(jax.lax.all_gather, axis_name="i", tiled=True),
            mesh=mesh,
            in_specs=P("i"),
            out_specs=P("i"),
            check_vma=False,
        )
    )
    text = f.lower(put(mesh, jnp.zeros(8), P("i"))).compile().as_text()
    assert "all-gather(" in text and not accl_calls(text)


@pytest.mark.parametrize("spec", [P(None, "model"), P()])
def test_partial_manual_collectives(spec):
    """Manual over "data" only, "model" left to the partitioner (explicit): each device
    reduce-scatters, gathers and permutes its own shard along "data" (the custom calls
    see the local [.., 3] block where the operand is sharded along "model")."""
    mesh = jax.make_mesh((4, 2), ("data", "model"))
    x = put(mesh, values((16, 6), "float32"), P("data", *spec[1:]))
    shift = [(i, (i + 1) % 4) for i in range(4)]

    def body(v):
        s = jax.lax.psum_scatter(v, "data", tiled=True)
        g = jax.lax.all_gather(s, "data", tiled=True)
        return g, jax.lax.ppermute(v, "data", shift)

    along = P("data", *spec[1:])
    ours = jax.jit(
        jax_accl.shard_map(
            body, mesh=mesh, in_specs=P("data"), out_specs=P("data"), axis_names={"data"}
        ),
        out_shardings=(NamedSharding(mesh, along),) * 2,
    )
    # jax.lax's psum_scatter cannot lower there (an assertion in JAX 0.10): the same
    # collectives over "data" in a shard_map manual over both axes are the reference.
    theirs = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=along, out_specs=along))
    assert_same(ours(x), theirs(x))
    text = ours.lower(x).compile().as_text()
    # XLA's partitioner gathers the outputs along "model" at the region's end (dimension
    # 1, as it does for jax.lax's own collectives there): none of its collectives along
    # "data" is left.
    left = xla_collectives(text)
    assert set(left) <= {"all-gather("}, left
    gathers = [line for line in text.splitlines() if "all-gather(" in line]
    assert all("dimensions={1}" in line for line in gathers), gathers
    assert accl_calls(text) == {"accl_reduce_scatter", "accl_all_gather", "accl_ppermute"}
    local = "[4,3]" if spec == P(None, "model") else "[4,6]"
    calls = [line for line in text.splitlines() if 'custom_call_target="accl_all_gather"' in line]
    assert calls and all(local in line for line in calls), calls


def test_partial_manual_scatter_of_a_dimension_sharded_along_an_automatic_axis_is_refused():
    mesh = jax.make_mesh((4, 2), ("data", "model"))
    x = put(mesh, values((64, 6), "float32"), P(("data", "model")))
    f = jax.jit(
        jax_accl.shard_map(
            lambda v: jax.lax.psum_scatter(v, "data", tiled=True),
            mesh=mesh,
            in_specs=P("data"),
            out_specs=P("data"),
            axis_names={"data"},
        )
    )
    with pytest.raises(NotImplementedError, match="sharded along the automatic axes 'model'"):
        f.lower(x)


@pytest.mark.parametrize("dtype", ["int32", "float32"])
def test_pmap(dtype):
    """jax_accl's psum_scatter, all_gather and ppermute under jax.pmap: jax.lax's results
    (integers bitwise), and the compiled program holds jax_accl's calls only."""
    x = values((8, 16, 3), dtype)
    shift = [(j, (j + 3) % 8) for j in range(8)]

    def build(lib):
        def body(v):
            return (
                lib.psum_scatter(v, "i", tiled=True),
                lib.all_gather(v, "i", axis=1),
                lib.ppermute(v, "i", shift),
            )

        return jax.pmap(body, axis_name="i")

    ours = build(jax_accl)
    assert_same(ours(x), build(jax.lax)(x))
    text = ours.lower(x).compile().as_text()
    assert xla_collectives(text) == {}, xla_collectives(text)
    assert accl_calls(text) == {"accl_reduce_scatter", "accl_all_gather", "accl_ppermute"}


def test_remat_of_a_gathered_weight():
    """jax.checkpoint around an FSDP gather: the gather runs again on the backward pass
    and its transpose is a reduce-scatter, both jax_accl's."""
    mesh = jax.make_mesh((8,), ("i",))
    w = put(mesh, values((16, 4), "float32"), P("i"))

    def loss(w):
        gathered = jax.checkpoint(lambda v: jnp.tanh(jax.lax.all_gather(v, "i", tiled=True)))(w)
        return jax.lax.psum(jnp.sum(gathered**2), "i")

    def grad_of(smap):
        return jax.jit(jax.grad(smap(loss, mesh=mesh, in_specs=P("i"), out_specs=P())))

    ours = grad_of(jax_accl.shard_map)
    assert_same(ours(w), grad_of(jax.shard_map)(w))
    text = ours.lower(w).compile().as_text()
    assert xla_collectives(text) == {}, xla_collectives(text)
    gathers = text.count('custom_call_target="accl_all_gather"')
    assert gathers >= 2 and "accl_reduce_scatter" in accl_calls(text), gathers  # forward + remat
