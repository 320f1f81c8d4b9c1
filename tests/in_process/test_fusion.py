"""Gradient fusion: psum of a pytree is one custom call per dtype bucket (no concatenation
copy), with results identical to leaf-by-leaf jax.lax.psum."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from accl_testing import P, assert_same, compare, put, run, values

import jax_accl


def model_like_tree(n_leaves=100):
    """Leaves of the sizes of a small MLP/transformer: matrices, biases, scalars."""
    rng = np.random.default_rng(7)
    shapes = [(8,) + s for s in [(64, 64), (64,), (), (3, 5), (0,), (128,), (7,)]]
    return {
        f"layer{k}": values(shapes[k % len(shapes)], "float32", seed=k) for k in range(n_leaves)
    } | {"step": rng.integers(0, 9, (8, 3)).astype(np.int32)}


def test_many_leaf_pytree_is_one_call_per_dtype(mesh8):
    tree = model_like_tree()
    specs = jax.tree.map(lambda _: P("i"), tree)
    args = put(mesh8, tree, specs)
    fn = jax.jit(
        jax.shard_map(
            lambda t: jax_accl.psum(t, "i"),
            mesh=mesh8,
            in_specs=(specs,),
            out_specs=jax.tree.map(lambda _: P(), tree),
        )
    )
    hlo = fn.lower(args).compile().as_text()
    assert hlo.count('custom_call_target="accl_allreduce"') == 2  # float32 and int32
    got = fn(args)
    want = jax.jit(
        jax.shard_map(
            lambda t: jax.tree.map(lambda x: jax.lax.psum(x, "i"), t),
            mesh=mesh8,
            in_specs=(specs,),
            out_specs=jax.tree.map(lambda _: P(), tree),
        )
    )(args)
    assert_same(got, want)


def test_fusion_threshold_splits_buckets(mesh8, monkeypatch):
    monkeypatch.setenv("JAX_ACCL_FUSION_BYTES", str(64 * 64 * 4 + 1))
    tree = [values((8, 64, 64), "float32", seed=k) for k in range(4)]
    specs = [P("i")] * 4
    fn = jax.jit(
        jax.shard_map(
            lambda t: jax_accl.psum(t, "i"), mesh=mesh8, in_specs=(specs,), out_specs=[P()] * 4
        )
    )
    args = put(mesh8, tree, specs)
    assert fn.lower(args).compile().as_text().count('custom_call_target="accl_allreduce"') == 4
    assert_same(fn(args), [np.asarray(t).sum(0, keepdims=True) for t in tree])


@pytest.mark.parametrize("check_vma", [True, False])
def test_fused_pytree_under_grad(mesh8, check_vma):
    a = values((8, 4, 3), "float32")
    b = values((8, 5), "float32", seed=1)

    def body(lib, x, y):
        def loss(pair):
            total = lib.psum({"x": pair[0] ** 2, "y": jnp.sin(pair[1])}, "i")
            return jnp.sum(total["x"]) + jnp.sum(total["y"])

        return jax.grad(loss)((x, y))

    compare(body, mesh8, [P("i"), P("i")], (P("i"), P("i")), a, b, check_vma=check_vma)


def test_fused_pytree_mixing_batched_and_unbatched_leaves_under_vmap(mesh8):
    a = values((8, 4, 3), "float32")
    b = values((8, 5), "float32", seed=1)

    def body(lib, x, y):
        return jax.vmap(lambda r: lib.psum((r, y), ("v", "i")), axis_name="v")(x)

    got = run("accl", body, mesh8, [P("i"), P("i")], (P(), P()), a, b)
    assert_same(got, run("lax", body, mesh8, [P("i"), P("i")], (P(), P()), a, b, check_vma=False))


def test_mixed_dtypes_and_scalars_in_one_tree(mesh8):
    x = values((8, 6), "int8")
    y = values((8,), "float16", seed=2)

    def body(lib, a, b):
        return lib.psum({"a": a, "b": b, "c": 3, "d": (a, b > 0)}, "i")

    compare(body, mesh8, [P("i"), P("i")], P(), x, y)


def test_many_independent_large_allreduces_do_not_deadlock(mesh8, monkeypatch):
    """XLA runs independent custom calls concurrently; each blocking one has a thread."""
    monkeypatch.setenv("JAX_ACCL_TIMEOUT_S", "20")
    leaves = [values((8, 65536), "float32", seed=k) for k in range(24)]
    specs = [P("i")] * len(leaves)
    fn = jax.jit(
        jax.shard_map(
            lambda t: [jax_accl.psum(x, "i") for x in t],
            mesh=mesh8,
            in_specs=(specs,),
            out_specs=specs,
            check_vma=False,
        )
    )
    got = fn(put(mesh8, leaves, specs))
    for g, x in zip(got, leaves):
        np.testing.assert_allclose(np.asarray(g)[0], x.sum(0), rtol=1e-5, atol=1e-5)
