"""jax_accl.broadcast and jax_accl.reduce in one process of 8 CPU devices, against the
psum-of-a-masked-value formulation a JAX user writes with jax.lax (integers bitwise):
several roots, one-shot (small) and flat (from 64 KiB) sizes, every dtype family,
two-axis meshes, pytrees, vmap, gradients (each the other's transpose), the compiled
HLO (jax_accl's calls, no XLA all-reduce) and the root's checks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from accl_testing import P, put

import jax_accl


def lax_broadcast(v, axes, root):
    return jax.lax.psum(jnp.where(jax.lax.axis_index(axes) == root, v, 0), axes)


def lax_reduce(v, axes, root, op="sum"):
    reduced = {"sum": jax.lax.psum, "max": jax.lax.pmax, "min": jax.lax.pmin}[op](v, axes)
    return jnp.where(jax.lax.axis_index(axes) == root, reduced, 0)


def step(body, mesh, spec):
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(spec,), out_specs=spec))


def assert_matches(ours, theirs, mesh, spec, x, target):
    """ours(x) is theirs(x) (integers bitwise), and ours compiles to `target` calls and
    no XLA all-reduce."""
    placed = put(mesh, x, spec)
    got, want = np.asarray(ours(placed)), np.asarray(theirs(placed))
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype.kind in "biu":
        assert got.tobytes() == want.tobytes()
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    text = ours.lower(placed).compile().as_text()
    assert "all-reduce(" not in text and f'custom_call_target="{target}"' in text
    return text


def data(dtype, elements):
    x = np.arange(8 * elements).reshape(8, elements) % 201 - 100  # integer-valued: exact sums
    return jnp.asarray(x.astype(dtype) * (1 if np.dtype(dtype).kind in "iu" else 0.5))


@pytest.mark.parametrize("dtype", [np.int32, np.float32])
@pytest.mark.parametrize("elements", [5, 70_000], ids=["one_shot", "flat"])
@pytest.mark.parametrize("root", [0, 3, 7])
def test_broadcast_is_the_masked_psum(mesh8, dtype, elements, root):
    x = data(dtype, elements)
    ours = step(lambda v: jax_accl.broadcast(v * 3, "i", root), mesh8, P("i"))
    theirs = step(lambda v: lax_broadcast(v * 3, "i", root), mesh8, P("i"))
    assert_matches(ours, theirs, mesh8, P("i"), x, "accl_broadcast")


@pytest.mark.parametrize("dtype,op", [(np.int32, "sum"), (np.int32, "max"), (np.float32, "sum")])
@pytest.mark.parametrize("elements", [5, 70_000], ids=["one_shot", "flat"])
@pytest.mark.parametrize("root", [0, 5])
def test_reduce_is_the_masked_psum_at_the_root_and_zeros_elsewhere(
    mesh8, dtype, op, elements, root
):
    x = data(dtype, elements)
    ours = step(lambda v: jax_accl.reduce(v - 1, "i", root, op=op), mesh8, P("i"))
    theirs = step(lambda v: lax_reduce(v - 1, "i", root, op), mesh8, P("i"))
    assert_matches(ours, theirs, mesh8, P("i"), x, "accl_reduce")


@pytest.mark.parametrize(
    "dtype", ["int8", "uint8", "int16", "uint16", "float16", "bfloat16", "complex64", "bool"]
)
def test_every_dtype_family_against_numpy(mesh8, dtype):
    """Small integer values, so every sum is exact in every dtype: bitwise NumPy's."""
    x = np.arange(8 * 3).reshape(8, 3) % 5
    x = x.astype(bool) if dtype == "bool" else x.astype(jnp.dtype(dtype))
    body = lambda v: (jax_accl.broadcast(v, "i", 6), jax_accl.reduce(v, "i", 2))  # noqa: E731
    fn = jax.jit(jax.shard_map(body, mesh=mesh8, in_specs=(P("i"),), out_specs=(P("i"),) * 2))
    got_b, got_r = (np.asarray(o) for o in fn(put(mesh8, jnp.asarray(x), P("i"))))
    want_r = np.zeros_like(x)
    want_r[2] = x.any(0) if dtype == "bool" else x.sum(0, dtype=x.dtype)
    assert got_b.tobytes() == np.broadcast_to(x[6], x.shape).tobytes()
    assert got_r.tobytes() == want_r.tobytes()


@pytest.mark.parametrize("axes,root", [("y", 3), ("x", 1), (("x", "y"), 5)])
def test_two_axis_mesh_roots_are_axis_indices(axes, root):
    mesh = jax.make_mesh((2, 4), ("x", "y"))
    x = data(np.int32, 6)
    body = lambda lib: lambda v: lib[0](v, axes, root) + lib[1](v, axes, root)  # noqa: E731
    ours = step(body((jax_accl.broadcast, jax_accl.reduce)), mesh, P(("x", "y")))
    theirs = step(body((lax_broadcast, lax_reduce)), mesh, P(("x", "y")))
    assert_matches(ours, theirs, mesh, P(("x", "y")), x, "accl_broadcast")


def test_a_pytree_of_two_dtypes_is_one_call_per_dtype(mesh8):
    tree = {"a": data(np.int32, 4), "b": data(np.int32, 2), "f": data(np.float32, 3)}
    specs = {k: P("i") for k in tree}
    fn = jax.jit(
        jax.shard_map(
            lambda t: jax_accl.broadcast(t, "i", 4), mesh=mesh8, in_specs=(specs,), out_specs=specs
        )
    )
    placed = put(mesh8, tree, specs)
    got = fn(placed)
    for k, v in tree.items():
        assert np.asarray(got[k]).tobytes() == np.broadcast_to(v[4], v.shape).tobytes()
    assert fn.lower(placed).compile().as_text().count('custom_call_target="accl_broadcast"') == 2


@pytest.mark.parametrize("what", ["broadcast", "reduce"])
def test_gradient_is_the_other_collective_and_the_masked_psums(mesh8, what):
    """d/dx of sum(sin(f(x)) * x): a broadcast's transpose is a reduce to the root, a
    reduce's a broadcast from it; both give the masked psum formulation's gradient."""
    x = jnp.linspace(-1.0, 1.0, 8 * 3, dtype=jnp.float32).reshape(8, 3)
    ours_f = {"broadcast": jax_accl.broadcast, "reduce": jax_accl.reduce}[what]
    theirs_f = {"broadcast": lax_broadcast, "reduce": lax_reduce}[what]

    def grad_of(f):
        return lambda v: jax.grad(lambda u: jnp.sum(jnp.sin(f(u, "i", 6)) * u))(v)

    other = {"broadcast": "accl_reduce", "reduce": "accl_broadcast"}[what]
    text = assert_matches(
        step(grad_of(ours_f), mesh8, P("i")),
        step(grad_of(theirs_f), mesh8, P("i")),
        mesh8,
        P("i"),
        x,
        f"accl_{what}",
    )
    assert f'custom_call_target="{other}"' in text  # the transpose


def test_vmap_inside_shard_map_and_over_the_vmapped_axis(mesh8):
    x = data(np.int32, 4 * 3).reshape(8 * 4, 3)

    def body(b, r):
        return lambda v: jax.vmap(lambda col: b(col, "i", 2) + r(col, "i", 5), 1, 1)(v)

    assert_matches(
        step(body(jax_accl.broadcast, jax_accl.reduce), mesh8, P("i")),
        step(body(lax_broadcast, lax_reduce), mesh8, P("i")),
        mesh8,
        P("i"),
        x,
        "accl_reduce",
    )
    y = np.arange(4 * 5, dtype=np.int32).reshape(4, 5)
    got_b = jax.vmap(lambda v: jax_accl.broadcast(v, "b", 1), axis_name="b")(y)
    got_r = jax.vmap(lambda v: jax_accl.reduce(v, "b", 3, op="max"), axis_name="b")(y)
    assert np.array_equal(got_b, np.broadcast_to(y[1], y.shape))
    assert np.array_equal(got_r, np.where(np.arange(4)[:, None] == 3, y.max(0), 0))
    # an unbatched operand: the same at every position of the vmapped axis
    got = jax.vmap(lambda _: jax_accl.reduce(y[0], "b", 2), axis_name="b")(y)
    assert np.array_equal(got, np.where(np.arange(4)[:, None] == 2, 4 * y[0], 0))


@pytest.mark.parametrize("root,error", [(8, ValueError), (-1, ValueError), (1.5, TypeError)])
@pytest.mark.parametrize("what", ["broadcast", "reduce"])
def test_a_root_outside_the_axis_names_it_and_the_size(mesh8, root, error, what):
    f = getattr(jax_accl, what)
    fn = step(lambda v: f(v, "i", root), mesh8, P("i"))
    with pytest.raises(error, match=f"jax_accl.{what}: root.*{root}") as raised:
        fn(put(mesh8, data(np.int32, 2), P("i")))
    if error is ValueError:
        assert "of size 8" in str(raised.value)
