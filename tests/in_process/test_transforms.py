"""JAX tier: vmap, grad, jvp, linear_transpose, control flow, pmap and pjit-style jit,
each compared with the same program written with jax.lax."""

import jax
import jax.numpy as jnp
import pytest
from accl_testing import LIBS, P, assert_same, compare, put, run, values
from jax.sharding import NamedSharding

import jax_accl


@pytest.fixture(scope="module")
def mesh42():
    return jax.make_mesh((4, 2), ("i", "j"))


# --- vmap -------------------------------------------------------------------------


def test_vmap_batched_operand(mesh8):
    x = values((8, 3, 5), "float32")
    compare(lambda lib, a: jax.vmap(lambda r: lib.psum(r, "i"))(a), mesh8, [P("i")], P(), x)


def test_vmap_collective_over_the_vmapped_axis():
    x = values((6, 4), "int32")
    for fn in ("psum", "pmax", "pmin", "pmean"):
        got = jax.vmap(lambda r: getattr(jax_accl, fn)(r, "b"), axis_name="b")(x)
        want = jax.vmap(lambda r: getattr(jax.lax, fn)(r, "b"), axis_name="b")(x)
        assert_same(got, want)


def test_vmap_unbatched_value_over_vmapped_axis():
    x = values((4,), "float32")
    for fn in ("psum", "pmax"):
        got = jax.vmap(lambda r: getattr(jax_accl, fn)(x, "b"), axis_name="b")(jnp.zeros(5))
        want = jax.vmap(lambda r: getattr(jax.lax, fn)(x, "b"), axis_name="b")(jnp.zeros(5))
        assert_same(got, want)


@pytest.mark.parametrize("check_vma", [True, False])
@pytest.mark.parametrize("in_axes", [0, 1])
def test_vmap_tuple_mixing_vmapped_and_mesh_axes(mesh8, in_axes, check_vma):
    x = values((8, 3, 4), "int32")

    def body(lib, a):
        return jax.vmap(lambda r: lib.psum(r, ("b", "i")), in_axes=in_axes, axis_name="b")(a)

    # jax.lax.psum only accepts this mix with check_vma=False; jax_accl takes both.
    got = run("accl", body, mesh8, [P("i")], P(), x, check_vma=check_vma)
    assert_same(got, run("lax", body, mesh8, [P("i")], P(), x, check_vma=False))


def test_nested_vmap_in_shard_map(mesh42):
    x = values((4, 2, 3, 2), "float32")

    def body(lib, a):
        inner = jax.vmap(lambda r: lib.psum(r, ("c", "i")), axis_name="c")
        return jax.vmap(inner, axis_name="d")(a)

    got = run("accl", body, mesh42, [P("i", "j")], P(None, "j"), x)
    assert_same(got, run("lax", body, mesh42, [P("i", "j")], P(None, "j"), x, check_vma=False))


# --- autodiff ---------------------------------------------------------------------


@pytest.mark.parametrize("check_vma", [True, False])
def test_grad_matches_psum(mesh8, check_vma):
    x = values((8, 5), "float32")
    w = values((5,), "float32", seed=3)

    def body(lib, a, b):
        def loss(weights):
            return lib.psum(jnp.sum(jnp.tanh(a * weights) ** 2), "i")

        return jax.grad(loss)(b)

    out = P() if check_vma else P("i")
    compare(body, mesh8, [P("i"), P()], out, x, w, check_vma=check_vma)


@pytest.mark.parametrize("check_vma", [True, False])
def test_grad_through_psum_of_activations(mesh8, check_vma):
    x = values((8, 4), "float32")

    def body(lib, a):
        return jax.grad(lambda v: jnp.sum(jnp.sin(lib.psum(v * v, "i"))))(a)

    compare(body, mesh8, [P("i")], P("i"), x, check_vma=check_vma)


@pytest.mark.parametrize("check_vma", [True, False])
def test_jvp_and_linear_transpose(mesh8, check_vma):
    x = values((8, 3), "float32")
    t = values((8, 3), "float32", seed=4)

    def body(lib, a, b):
        primal, tangent = jax.jvp(lambda v: lib.psum(v, "i"), (a,), (b,))
        transpose = jax.linear_transpose(lambda v: lib.psum(v, "i"), a)
        (ct,) = transpose(primal)
        return primal, tangent, ct

    out = (P(), P(), P("i")) if check_vma else (P("i"), P("i"), P("i"))
    compare(body, mesh8, [P("i"), P("i")], out, x, t, check_vma=check_vma)


def test_pmax_has_no_derivative_like_jax(mesh8):
    x = put(mesh8, values((8, 2), "float32"), P("i"))
    for lib in (jax.lax, jax_accl):
        f = jax.shard_map(
            lambda a: jax.grad(lambda v: jnp.sum(lib.pmax(v, "i")))(a),
            mesh=mesh8,
            in_specs=P("i"),
            out_specs=P("i"),
        )
        with pytest.raises(NotImplementedError):
            jax.jit(f)(x)


# --- control flow -----------------------------------------------------------------


def test_scan_fori_loop_cond(mesh8):
    x = values((8, 6), "float32")

    def body(lib, a):
        def step(carry, _):
            return lib.psum(carry, "i") / 8.0 + carry * 0.5, lib.pmax(carry, "i")

        c1, ys = jax.lax.scan(step, a, None, length=4)
        c2 = jax.lax.fori_loop(0, 3, lambda k, v: lib.pmean(v, "i") * 0.5 + v, a)
        c3 = jax.lax.cond(
            jnp.sum(lib.psum(a, "i")) > 0, lambda v: lib.psum(v, "i"), lambda v: lib.pmin(v, "i"), a
        )
        return c1, ys, c2, c3

    compare(body, mesh8, [P("i")], (P("i"), P(), P("i"), P()), x)


def test_two_independent_allreduces(mesh42):
    x = values((4, 2, 1000), "float32")
    y = values((4, 2, 33), "int32")

    def body(lib, a, b):
        return lib.psum(a, "i"), lib.psum(b, "j"), lib.pmax(a, ("i", "j"))

    compare(body, mesh42, [P("i", "j"), P("i", "j")], (P(None, "j"), P("i"), P()), x, y)


def test_repeated_calls_and_recompiles(mesh8):
    x = values((8, 16), "int32")
    for k in range(5):
        compare(lambda lib, a: lib.psum(a + k, "i"), mesh8, [P("i")], P(), x)


# --- pmap and pjit-style jit --------------------------------------------------------


def test_pmap():
    x = values((8, 5), "float32")
    for fn in ("psum", "pmax", "pmean"):
        got = jax.pmap(lambda v: getattr(jax_accl, fn)(v, "i"), axis_name="i")(x)
        want = jax.pmap(lambda v: getattr(jax.lax, fn)(v, "i"), axis_name="i")(x)
        assert_same(got, want)


def test_pmap_with_grad():
    x = values((8, 5), "float32")

    def make(lib):
        return jax.pmap(jax.grad(lambda v: lib.psum(jnp.sum(v**3), "i")), axis_name="i")

    assert_same(make(jax_accl)(x), make(jax.lax)(x))


def test_jit_with_explicit_shardings(mesh42):
    x = values((8, 6), "float32")
    sharded = NamedSharding(mesh42, P(("i", "j")))
    replicated = NamedSharding(mesh42, P())

    def make(lib):
        inner = jax.shard_map(
            lambda a: lib.psum(a, ("i", "j")), mesh=mesh42, in_specs=P(("i", "j")), out_specs=P()
        )
        return jax.jit(
            lambda a: inner(a * 2.0) + 1.0, in_shardings=sharded, out_shardings=replicated
        )

    got = make(jax_accl)(jax.device_put(x, sharded))
    assert got.sharding.is_equivalent_to(replicated, got.ndim)
    assert_same(got, make(jax.lax)(jax.device_put(x, sharded)))


def test_libs_are_the_two_under_test():
    assert set(LIBS) == {"lax", "accl"}
