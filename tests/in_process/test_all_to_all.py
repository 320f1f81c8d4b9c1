"""jax_accl.all_to_all against jax.lax.all_to_all, in one process of 8 CPU devices:
every placement of the split and concat dimensions, tiled or not, every dtype (bitwise),
small (one-shot) and large buffers, meshes of two axes and tuples of axes, replica groups,
pytrees (one call per dtype bucket), gradients (the all-to-all back), vmap, routing of
jax.lax's own, and the compiled HLO: no XLA all-to-all left."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from accl_testing import P, put

import jax_accl

LIBS = (jax.lax, jax_accl)


def compiled(fn, mesh, spec, x) -> str:
    return fn.lower(put(mesh, x, spec)).compile().as_text()


def both(body, mesh, spec, x, check_vma=True, calls=1):
    """`body(lib, v)` under shard_map with jax.lax and with jax_accl: bitwise equal, and
    jax_accl's compiled program holds `calls` accl_all_to_all and no XLA all-to-all."""
    outs = []
    for lib in LIBS:
        fn = jax.jit(
            jax.shard_map(
                lambda v, lib=lib: body(lib, v),
                mesh=mesh,
                in_specs=(spec,),
                out_specs=spec,
                check_vma=check_vma,
            )
        )
        outs.append((fn, jax.tree.map(np.asarray, fn(put(mesh, x, spec)))))
    (_, want), (fn, got) = outs
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert g.dtype == w.dtype and g.shape == w.shape and g.tobytes() == w.tobytes()
    text = compiled(fn, mesh, spec, x)
    assert "all-to-all(" not in text
    assert text.count('custom_call_target="accl_all_to_all"') == calls
    return fn


# (shape per device, split_axis, concat_axis, tiled)
LAYOUTS = [
    ((8, 3), 0, 0, False),
    ((8, 3), 0, 1, False),
    ((3, 8), 1, 0, False),
    ((2, 8, 5), 1, 2, False),
    ((16, 3), 0, 0, True),
    ((16, 3), 0, 1, True),
    ((3, 24), 1, 0, True),
    ((2, 3, 40), 2, 1, True),
]


@pytest.mark.parametrize("shape,split,concat,tiled", LAYOUTS)
def test_every_layout_matches_jax_lax_bitwise(mesh8, shape, split, concat, tiled):
    x = (jnp.arange(8 * np.prod(shape), dtype=jnp.int32) * 7 - 11).reshape(
        (8 * shape[0],) + shape[1:]
    )

    def body(lib, v):
        return lib.all_to_all(v, "i", split, concat, tiled=tiled)

    both(body, mesh8, P("i"), x)


def test_negative_axes_count_from_the_end(mesh8):
    """(jax.lax takes only non-negative ones; jax_accl reads others as numpy does.)"""
    x = jnp.arange(8 * 2 * 3 * 40, dtype=jnp.int32).reshape(8 * 2, 3, 40)

    def body(lib, v):
        axes = (-1, -3) if lib is jax_accl else (2, 0)
        return lib.all_to_all(v, "i", *axes, tiled=True)

    both(body, mesh8, P("i"), x)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "int8", "uint32", "bool"])
def test_dtypes(mesh8, dtype):
    x = (jnp.arange(8 * 8 * 5) % 7).astype(dtype).reshape(8 * 8, 5)
    both(lambda lib, v: lib.all_to_all(v, "i", 0, 0, tiled=True), mesh8, P("i"), x)


@pytest.mark.parametrize("elements", [1, 70_000])
def test_small_and_large_blocks(mesh8, elements):
    x = jnp.arange(8 * 8 * elements, dtype=jnp.float32).reshape(8 * 8, elements)
    both(lambda lib, v: lib.all_to_all(v * 3, "i", 0, 0, tiled=True), mesh8, P("i"), x)


@pytest.mark.parametrize("check_vma", [True, False])
@pytest.mark.parametrize("axes", [("x", "y"), ("y", "x"), "y", "x"])
def test_two_axis_mesh_and_tuples_of_axes(axes, check_vma):
    mesh = jax.make_mesh((2, 4), ("x", "y"))
    n = 8 if isinstance(axes, tuple) else (4 if axes == "y" else 2)
    x = jnp.arange(8 * n * 6, dtype=jnp.float32).reshape(8 * n, 6)
    both(
        lambda lib, v: lib.all_to_all(v, axes, 0, 1, tiled=True),
        mesh,
        P(("x", "y")),
        x,
        check_vma,
    )


def test_replica_groups(mesh8):
    groups = [[0, 2, 4, 6], [1, 3, 5, 7]]
    x = jnp.arange(8 * 4 * 3, dtype=jnp.int32).reshape(8 * 4, 3)
    both(
        lambda lib, v: lib.all_to_all(v, "i", 0, 0, axis_index_groups=groups, tiled=True),
        mesh8,
        P("i"),
        x,
        check_vma=False,
    )


def test_a_pytree_moves_in_one_call_per_dtype(mesh8):
    x = jnp.arange(8 * 8 * 2, dtype=jnp.float32).reshape(8 * 8, 2)

    def body(lib, v):
        tree = {"a": v, "b": v * 2, "c": v.astype(jnp.int32)}
        out = lib.all_to_all(tree, "i", 0, 1, tiled=True)
        return out["a"] + out["b"] + out["c"].astype(jnp.float32)

    both(body, mesh8, P("i"), x, calls=2)


def test_gradient_is_the_all_to_all_back_and_jax_accls(mesh8):
    x = jnp.linspace(-1.0, 1.0, 8 * 8 * 3, dtype=jnp.float32).reshape(8 * 8, 3)

    def body(lib, v):
        def loss(u):
            out = lib.all_to_all(u, "i", 0, 1, tiled=True)  # (1, 24) per device
            return jnp.sum(jnp.sin(out) * jnp.arange(24, dtype=jnp.float32))

        return jax.grad(loss)(v)

    both(body, mesh8, P("i"), x, calls=2)  # forward and its transpose


def test_vmap_inside_shard_map_and_over_the_vmapped_axis(mesh8):
    x = jnp.arange(8 * 8 * 3, dtype=jnp.int32).reshape(8 * 8, 3)

    def body(lib, v):
        return jax.vmap(lambda col: lib.all_to_all(col, "i", 0, 0, tiled=True), 1, 1)(v)

    both(body, mesh8, P("i"), x)
    y = jnp.arange(4 * 4 * 4, dtype=jnp.float32).reshape(4, 4, 4)
    for split, concat in [(0, 0), (0, 1), (1, 0)]:
        got, want = (
            jax.vmap(lambda v, lib=lib: lib.all_to_all(v, "b", split, concat), axis_name="b")(y)
            for lib in (jax_accl, jax.lax)
        )
        np.testing.assert_array_equal(got, want)


def test_routing_carries_jax_lax_all_to_all_and_its_transpose(mesh8):
    x = jnp.linspace(-1.0, 1.0, 8 * 8 * 3, dtype=jnp.float32).reshape(8 * 8, 3)

    def loss(v):
        return jnp.sum(jnp.cos(jax.lax.all_to_all(v, "i", 0, 1, tiled=True)))

    def grads(shard_map):
        return jax.jit(shard_map(jax.grad(loss), mesh=mesh8, in_specs=P("i"), out_specs=P("i")))

    want = np.asarray(grads(jax.shard_map)(put(mesh8, x, P("i"))))
    fn = grads(jax_accl.shard_map)
    np.testing.assert_array_equal(np.asarray(fn(put(mesh8, x, P("i")))), want)
    text = compiled(fn, mesh8, P("i"), x)
    assert "all-to-all(" not in text
    assert text.count('custom_call_target="accl_all_to_all"') == 2


def test_errors_name_what_is_wrong(mesh8):
    x = put(mesh8, jnp.zeros((8 * 6, 2), jnp.float32), P("i"))

    def ours(axis, split, tiled):
        body = lambda v: jax_accl.all_to_all(v, axis, split, 0, tiled=tiled)  # noqa: E731
        return jax.jit(jax.shard_map(body, mesh=mesh8, in_specs=P("i"), out_specs=P("i")))(x)

    with pytest.raises(ValueError, match="size 6 must equal the size of"):
        ours("i", 0, False)
    with pytest.raises(ValueError, match="size 6 must be divisible by the size of"):
        ours("i", 0, True)
    with pytest.raises(ValueError, match="split_axis 2 is out of range"):
        ours("i", 2, True)
    with pytest.raises(NameError, match="unbound axis name: j"):
        ours("j", 0, True)


def test_pmap():
    x = jnp.arange(8 * 8 * 3, dtype=jnp.int32).reshape(8, 8, 3)
    got, want = (
        np.asarray(jax.pmap(lambda v, lib=lib: lib.all_to_all(v, "p", 0, 1), axis_name="p")(x))
        for lib in (jax_accl, jax.lax)
    )
    assert got.tobytes() == want.tobytes()
    fn = jax.pmap(lambda v: jax_accl.all_to_all(v, "p", 0, 1), axis_name="p")
    text = fn.lower(x).compile().as_text()
    assert "all-to-all(" not in text and 'custom_call_target="accl_all_to_all"' in text
