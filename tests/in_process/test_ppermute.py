"""jax_accl.ppermute against jax.lax.ppermute, in one process of 8 CPU devices: shifts
and partial permutations (zeros where nothing arrives), meshes of two axes, large
buffers, gradients (the inverse permutation), vmap, and the compiled HLO."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from accl_testing import P, put

import jax_accl

LIBS = (jax.lax, jax_accl)


def both(body, mesh, spec, x, check_vma=True):
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
        outs.append((fn, np.asarray(fn(put(mesh, x, spec)))))
    (_, want), (fn, got) = outs
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    text = fn.lower(put(mesh, x, spec)).compile().as_text()
    assert "collective-permute" not in text and 'custom_call_target="accl_ppermute"' in text
    return fn


SHIFT = [(i, (i + 1) % 8) for i in range(8)]
PARTIAL = [(0, 3), (3, 0), (5, 6), (-1, 1)]  # -1 is index 7, as jax.lax reads it


@pytest.mark.parametrize("perm", [SHIFT, PARTIAL], ids=["shift", "partial"])
@pytest.mark.parametrize("elements", [1, 5, 70_000])
def test_permutations_match_jax_lax(mesh8, perm, elements):
    x = jnp.arange(8 * elements, dtype=jnp.int32).reshape(8, elements) * 7 - 11

    both(lambda lib, v: lib.ppermute(v, "i", perm), mesh8, P("i"), x)


@pytest.mark.parametrize("check_vma", [True, False])
@pytest.mark.parametrize("axes", [("x", "y"), "y", "x"])
def test_two_axis_mesh(axes, check_vma):
    mesh = jax.make_mesh((2, 4), ("x", "y"))
    n = 8 if len(axes) == 2 else (4 if axes == "y" else 2)
    perm = [(i, (i + 3) % n) for i in range(n)]
    x = jnp.arange(8 * 6, dtype=jnp.float32).reshape(8, 6)

    both(lambda lib, v: lib.ppermute(v * 2, axes, perm), mesh, P(("x", "y")), x, check_vma)


def test_gradient_is_the_inverse_permutation_and_jax_accls(mesh8):
    x = jnp.linspace(-1.0, 1.0, 8 * 3, dtype=jnp.float32).reshape(8, 3)

    def body(lib, v):
        return jax.grad(lambda u: jnp.sum(jnp.sin(lib.ppermute(u, "i", PARTIAL)) * u))(v)

    fn = both(body, mesh8, P("i"), x)
    text = fn.lower(put(mesh8, x, P("i"))).compile().as_text()
    assert text.count('custom_call_target="accl_ppermute"') == 2  # forward and its transpose


def test_vmap_inside_shard_map_and_over_the_vmapped_axis(mesh8):
    x = jnp.arange(8 * 4 * 3, dtype=jnp.int32).reshape(8 * 4, 3)

    def body(lib, v):
        return jax.vmap(lambda col: lib.ppermute(col, "i", SHIFT), in_axes=1, out_axes=1)(v)

    both(body, mesh8, P("i"), x)
    y = jnp.arange(4 * 5, dtype=jnp.float32).reshape(4, 5)
    perm = [(0, 2), (2, 1), (1, 3), (3, 0)]
    got, want = (
        jax.vmap(lambda v, lib=lib: lib.ppermute(v, "b", perm), axis_name="b")(y)
        for lib in (jax_accl, jax.lax)
    )
    np.testing.assert_array_equal(got, want)


def test_errors_name_what_is_wrong(mesh8):
    x = put(mesh8, jnp.zeros((8, 2), jnp.float32), P("i"))

    def ours(axis, perm):
        body = lambda v: jax_accl.ppermute(v, axis, perm)  # noqa: E731
        return jax.jit(jax.shard_map(body, mesh=mesh8, in_specs=P("i"), out_specs=P("i")))(x)

    with pytest.raises(ValueError, match="sources and destinations must be unique"):
        ours("i", [(0, 1), (2, 1)])
    with pytest.raises(ValueError, match="sources and destinations must be unique"):
        ours("i", [(0, 1), (8, 2)])  # 8 is index 0 again
    with pytest.raises(NameError, match="unbound axis name: j"):
        ours("j", SHIFT)
