"""Every all-reduce of a training step is jax_accl's, proved in the compiled HLO: under
patch_psum() for unmodified code, with jax_accl.shard_map / jax_accl.routed for code that
opts in, for the gradients autodiff reduces as for explicit collectives; results equal
jax.lax's over 10 optax steps."""

from functools import partial

import jax
import jax.numpy as jnp
import optax
import pytest
from accl_testing import P, assert_same, put, values
from jax.sharding import NamedSharding

import jax_accl

ACCL_CALL = 'custom_call_target="accl_allreduce"'


def xla_collectives(text: str) -> int:
    return sum(text.count(op) for op in ("all-reduce(", "reduce-scatter(", "all-gather("))


def loss_fn(params, x, y, model_axis=None, out_sharding=None):
    """A two-layer MLP; with model_axis, w1 is column- and w2 row-sharded (Megatron,
    manual); out_sharding: the second layer's, where "model" is an explicit axis."""
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    out = jnp.matmul(h, params["w2"], out_sharding=out_sharding)
    if model_axis:
        out = jax.lax.psum(out, model_axis)
    return jnp.mean((out - y) ** 2)


def make_step(optimizer, check_vma, model_axis=None, out_sharding=None):
    """A data-parallel optax step as written for jax.lax (no jax_accl in sight)."""

    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(
            partial(loss_fn, model_axis=model_axis, out_sharding=out_sharding)
        )(params, x, y)
        if check_vma:  # grads of replicated params are reduced by autodiff: average them
            grads = jax.tree.map(lambda g: g / jax.lax.psum(1, "data"), grads)
        else:  # local gradients: the explicit pmean reduces them
            grads = jax.lax.pmean(grads, "data")
        loss = jax.lax.pmean(loss, "data")
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step


def setup(mesh_shape, sharded_params):
    axes = ("data", "model")[: len(mesh_shape)]
    mesh = jax.make_mesh(mesh_shape, axes)
    params = {
        "w1": values((6, 16), "float32", seed=1) * 0.3,
        "b1": values((16,), "float32", seed=2) * 0.1,
        "w2": values((16, 3), "float32", seed=3) * 0.3,
    }
    specs = (
        {"w1": P(None, "model"), "b1": P("model"), "w2": P("model", None)}
        if sharded_params
        else {"w1": P(), "b1": P(), "w2": P()}
    )
    return mesh, params, specs


@pytest.mark.parametrize("check_vma", [True, False])
@pytest.mark.parametrize("layout", ["1d", "2d-replicated", "2d-sharded"])
def test_unmodified_optax_step_under_patch_psum(check_vma, layout):
    mesh_shape = (8,) if layout == "1d" else (4, 2)
    mesh, params, pspecs = setup(mesh_shape, layout == "2d-sharded")
    model_axis = "model" if layout == "2d-sharded" else None
    optimizer = optax.adam(1e-2)
    step = make_step(optimizer, check_vma, model_axis)
    ospecs = jax.tree.map(lambda _: P(), optimizer.init(params))
    if layout == "2d-sharded":  # adam's moments are sharded like the params
        ospecs = (ospecs[0]._replace(mu=pspecs, nu=pspecs), *ospecs[1:])
    x = values((32, 6), "float32", seed=4)
    y = values((32, 3), "float32", seed=5)

    def build():
        fn = jax.shard_map(
            step,
            mesh=mesh,
            in_specs=(pspecs, ospecs, P("data"), P("data")),
            out_specs=(pspecs, ospecs, P()),
            check_vma=check_vma,
        )
        return jax.jit(fn)

    def train(fn):
        p = put(mesh, params, pspecs)
        s = put(mesh, optimizer.init(params), ospecs)
        xs, ys = put(mesh, x, P("data")), put(mesh, y, P("data"))
        text = fn.lower(p, s, xs, ys).compile().as_text()
        losses = []
        for _ in range(10):
            p, s, loss = fn(p, s, xs, ys)
            losses.append(loss)
        return text, (p, losses)

    plain_text, want = train(build())
    with jax_accl.patch_psum():
        text, got = train(build())
    assert xla_collectives(plain_text) >= 1 and ACCL_CALL not in plain_text
    assert xla_collectives(text) == 0, [line for line in text.splitlines() if "all-reduce(" in line]
    assert text.count(ACCL_CALL) >= 1
    assert_same(got, want)


def test_gradient_reductions_are_fused():
    """The step's gradients and loss, reduced by autodiff and pmean, are one call."""
    mesh, params, pspecs = setup((8,), False)
    step = make_step(optax.sgd(0.1), True)
    opt_state = optax.sgd(0.1).init(params)
    fn = jax.jit(
        jax_accl.shard_map(
            step, mesh=mesh, in_specs=(P(), P(), P("data"), P("data")), out_specs=(P(), P(), P())
        )
    )
    x, y = (
        put(mesh, values((32, 6), "float32"), P("data")),
        put(mesh, values((32, 3), "float32", seed=1), P("data")),
    )
    text = fn.lower(params, opt_state, x, y).compile().as_text()
    assert xla_collectives(text) == 0 and text.count(ACCL_CALL) == 1


def test_fused_gradient_buckets_respect_the_size_limit(monkeypatch):
    """With a 256-byte limit the merged gradient call splits into several buckets, each
    a call of its own, and the step still equals jax.lax's."""
    monkeypatch.setenv("JAX_ACCL_FUSION_BYTES", "256")
    mesh, params, _ = setup((8,), False)
    optimizer = optax.sgd(0.1)
    specs = dict(mesh=mesh, in_specs=(P(), P(), P("data"), P("data")), out_specs=(P(), P(), P()))
    step = make_step(optimizer, True)
    ours = jax.jit(jax_accl.shard_map(step, **specs))
    theirs = jax.jit(jax.shard_map(step, **specs))
    args = (
        params,
        optimizer.init(params),
        put(mesh, values((32, 6), "float32"), P("data")),
        put(mesh, values((32, 3), "float32", seed=1), P("data")),
    )
    text = ours.lower(*args).compile().as_text()
    assert xla_collectives(text) == 0 and text.count(ACCL_CALL) >= 3
    assert_same(ours(*args), theirs(*args))


def test_jax_accl_shard_map_routes_grad_taken_outside():
    """The documentation's pattern: jax.grad of a shard_map whose loss is pmean'd."""
    mesh, params, _ = setup((8,), False)
    x, y = (
        put(mesh, values((32, 6), "float32"), P("data")),
        put(mesh, values((32, 3), "float32", seed=1), P("data")),
    )

    def loss_dp(p, x, y):
        return jax.lax.pmean(loss_fn(p, x, y), "data")

    specs = dict(mesh=mesh, in_specs=(P(), P("data"), P("data")), out_specs=P())
    ours = jax.jit(jax.grad(jax_accl.shard_map(loss_dp, **specs)))
    theirs = jax.jit(jax.grad(jax.shard_map(loss_dp, **specs)))
    text = ours.lower(params, x, y).compile().as_text()
    assert xla_collectives(text) == 0 and text.count(ACCL_CALL) >= 1
    assert_same(ours(params, x, y), theirs(params, x, y))
    # Outside jax_accl.shard_map nothing changed.
    assert ACCL_CALL not in theirs.lower(params, x, y).compile().as_text()


def test_routed_decorator_and_jit_cache():
    """A function traced without routing is traced again with it, and the other way."""
    mesh = jax.make_mesh((8,), ("data",))
    x = put(mesh, values((16, 4), "int32"), P("data"))
    fn = jax.jit(
        jax.shard_map(
            lambda v: jax.lax.psum(v, "data"), mesh=mesh, in_specs=P("data"), out_specs=P()
        )
    )
    want = fn(x)
    assert ACCL_CALL not in fn.lower(x).compile().as_text()
    with jax_accl.patch_psum():
        assert ACCL_CALL in fn.lower(x).compile().as_text()
        assert_same(fn(x), want)
    assert ACCL_CALL not in fn.lower(x).compile().as_text()
    routed = jax.jit(
        jax_accl.routed(
            jax.shard_map(
                lambda v: jax.lax.psum(v, "data"), mesh=mesh, in_specs=P("data"), out_specs=P()
            )
        )
    )
    assert ACCL_CALL in routed.lower(x).compile().as_text()
    assert_same(routed(x), want)


def test_reducing_reduced_gradients_communicates_as_jax_lax_does():
    """pmean of values autodiff already reduced (invariant along the axis) all-reduces
    them again, as jax.lax does (it pvaries them first): one jax_accl call where the
    compiled jax.lax program has an XLA all-reduce (XLA merges the identical two of
    pmean and psum), none of XLA's left."""
    mesh = jax.make_mesh((8,), ("data",))
    x = put(mesh, values((8, 4), "float32"), P("data"))
    w = values((4,), "float32", seed=1)

    def body(w, x):
        g = jax.grad(lambda w: jnp.sum(x @ w))(w)  # invariant: reduced by autodiff
        return jax.lax.pmean(g, "data"), jax.lax.psum(g, "data")

    ours = jax.jit(
        jax_accl.shard_map(body, mesh=mesh, in_specs=(P(), P("data")), out_specs=(P(), P()))
    )
    theirs = jax.jit(
        jax.shard_map(body, mesh=mesh, in_specs=(P(), P("data")), out_specs=(P(), P()))
    )
    text = ours.lower(w, x).compile().as_text()
    want_calls = xla_collectives(theirs.lower(w, x).compile().as_text())
    assert want_calls == 2  # the gradient's, and the one of pmean's and psum's
    assert xla_collectives(text) == 0 and text.count(ACCL_CALL) == want_calls
    assert_same(ours(w, x), theirs(w, x))


@pytest.mark.parametrize("op", ["pmax", "pmin", "psum"])
@pytest.mark.parametrize("dtype", ["int32", "float32"])
def test_tuple_of_axes_with_mixed_invariance(op, dtype):
    """An operand varying along only some of the reduced axes (check_vma=True)."""
    mesh = jax.make_mesh((4, 2), ("a", "b"))
    x = put(mesh, values((8, 3), dtype), P("a"))

    def body(lib, v):
        return getattr(lib, op)(v, ("a", "b"))

    def run(lib):
        return jax.jit(
            jax.shard_map(partial(body, lib), mesh=mesh, in_specs=P("a"), out_specs=P())
        )(x)

    try:
        want = run(jax.lax)
    except ValueError:  # psum (and pmax, pmin in newer jax) refuse it: so does jax_accl
        with pytest.raises(ValueError, match="varying"):
            run(jax_accl)
        return
    assert_same(run(jax_accl), want)


@pytest.mark.parametrize("spec", [P(None, "model"), P()])
@pytest.mark.parametrize("dtype", ["int32", "float32"])
def test_partial_manual_shard_map(spec, dtype):
    """Manual over "data" only, "model" left to the partitioner: each device all-reduces
    its own shard along "model" (its operand is never gathered first)."""
    mesh = jax.make_mesh((4, 2), ("data", "model"))
    x = jax.device_put(values((8, 6), dtype), NamedSharding(mesh, P("data", *spec[1:])))
    out = NamedSharding(mesh, spec)

    def build(lib):
        body = jax.shard_map(
            lambda v: (lib.psum(v * 2, "data"), lib.pmax(v, "data")),
            mesh=mesh,
            in_specs=P("data"),
            out_specs=(P(), P()),
            axis_names={"data"},
        )
        return jax.jit(body, out_shardings=(out, out))

    ours, theirs = build(jax_accl), build(jax.lax)
    assert_same(ours(x), theirs(x))
    text, ref = ours.lower(x).compile().as_text(), theirs.lower(x).compile().as_text()
    assert "all-reduce(" not in text and text.count(ACCL_CALL) >= 1
    assert ACCL_CALL not in ref
    local = "[2,3]" if spec == P(None, "model") else "[2,6]"
    assert all(local in line for line in text.splitlines() if ACCL_CALL in line)


def test_partial_manual_training_step():
    """A pjit-style step: manual data parallelism, the model axis automatic."""
    mesh, params, pspecs = setup((4, 2), True)
    optimizer = optax.sgd(0.1)
    step = make_step(optimizer, True, out_sharding=P())
    shardings = jax.tree.map(lambda s: NamedSharding(mesh, s), pspecs)
    p = jax.device_put(params, shardings)
    s = optimizer.init(p)
    x = jax.device_put(values((32, 6), "float32", seed=4), NamedSharding(mesh, P("data")))
    y = jax.device_put(values((32, 3), "float32", seed=5), NamedSharding(mesh, P("data")))

    def build(shard_map):
        return jax.jit(
            shard_map(
                step,
                mesh=mesh,
                in_specs=(P(), P(), P("data"), P("data")),
                out_specs=(P(), P(), P()),
                axis_names={"data"},
            )
        )

    ours, theirs = build(jax_accl.shard_map), build(jax.shard_map)
    text = ours.lower(p, s, x, y).compile().as_text()
    ref = theirs.lower(p, s, x, y).compile().as_text()
    # Over "data" every all-reduce is jax_accl's; the partitioner's own ones over the
    # automatic "model" axis (the sharded matmul: pairs of devices 2k, 2k+1) stay.
    over_model = "replica_groups=[4,2]<=[8]"

    def not_over_model(hlo):
        lines = hlo.splitlines()
        return [line for line in lines if "all-reduce(" in line and over_model not in line]

    assert not_over_model(ref) and not not_over_model(text)
    assert text.count(ACCL_CALL) >= 1
    got, want = (p, s), (p, s)
    for _ in range(10):
        got = ours(*got, x, y)[:2]
        want = theirs(*want, x, y)[:2]
    assert_same(got, want)
