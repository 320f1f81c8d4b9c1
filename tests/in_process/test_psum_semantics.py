"""JAX tier: jax_accl.psum/pmean/pmax/pmin give what jax.lax gives, on 8 CPU devices."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from accl_testing import P, assert_same, compare, run, values

import jax_accl

DTYPES = [
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
    "float16",
    ml_dtypes.bfloat16,
    "float32",
    "complex64",
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fn", ["psum", "pmax", "pmin"])
def test_every_dtype(mesh8, dtype, fn):
    if fn != "psum" and np.dtype(dtype).kind == "c":
        return  # not defined for complex numbers: see test_errors.py
    x = values((8, 37), dtype, seed=1)
    compare(lambda lib, a: getattr(lib, fn)(a, "i"), mesh8, [P("i")], P(), x)


def test_pmean(mesh8):
    compare(lambda lib, a: lib.pmean(a, "i"), mesh8, [P("i")], P(), values((8, 5), "float32"))


@pytest.mark.parametrize("shape", [(8,), (8, 1), (8, 0), (8, 7, 3), (8, 1001), (8, 4096)])
def test_shapes_including_scalar_and_empty(mesh8, shape):
    x = values(shape, "float32")
    compare(lambda lib, a: lib.psum(a, "i"), mesh8, [P("i")], P(), x)


def test_pytree_and_python_scalar(mesh8):
    x = values((8, 3), "float32")
    y = values((8,), "int32", seed=2)

    def body(lib, a, b):
        return lib.psum({"a": a, "b": (b, a * 2)}, "i"), lib.psum(1, "i"), lib.psum(2.5, "i")

    compare(body, mesh8, [P("i"), P("i")], (P(), P(), P()), x, y)


@pytest.mark.parametrize(
    "axes", ["x", "y", "z", ("x", "y"), ("x", "z"), ("y", "z"), ("x", "y", "z"), ("z", "x")]
)
def test_three_axis_mesh_groups(axes):
    mesh = jax.make_mesh((2, 2, 2), ("x", "y", "z"))
    x = values((2, 2, 2, 5), "int32")
    names = axes if isinstance(axes, tuple) else (axes,)
    out = P(*[None if a in names else a for a in ("x", "y", "z")])
    compare(lambda lib, a: lib.psum(a, axes), mesh, [P("x", "y", "z")], out, x)


@pytest.mark.parametrize("axes", ["a", "b", ("a", "b")])
def test_two_axis_mesh(axes):
    mesh = jax.make_mesh((4, 2), ("a", "b"))
    x = values((4, 2, 3), "float32")
    names = axes if isinstance(axes, tuple) else (axes,)
    out = P(*[None if a in names else a for a in ("a", "b")])
    for fn in ("psum", "pmax", "pmin", "pmean"):
        compare(lambda lib, v: getattr(lib, fn)(v, axes), mesh, [P("a", "b")], out, x)


def test_one_device_mesh():
    mesh = jax.make_mesh((1,), ("i",), devices=jax.devices()[:1])
    x = values((1, 4), "float32")
    compare(lambda lib, a: lib.psum(a, "i"), mesh, [P("i")], P(), x)


def test_check_vma_off(mesh8):
    x = values((8, 6), "float32")
    compare(lambda lib, a: lib.psum(a, "i"), mesh8, [P("i")], P("i"), x, check_vma=False)


def test_axis_index_groups_with_check_vma_off(mesh8):
    groups = [[0, 1, 2, 3], [4, 5, 6, 7]]
    x = values((8, 3), "int32")
    compare(
        lambda lib, a: lib.psum(a, "i", axis_index_groups=groups),
        mesh8,
        [P("i")],
        P("i"),
        x,
        check_vma=False,
    )
    uneven = [[0, 5], [1, 2, 3, 4, 6, 7]]
    compare(
        lambda lib, a: lib.psum(a, "i", axis_index_groups=uneven),
        mesh8,
        [P("i")],
        P("i"),
        x,
        check_vma=False,
    )


def test_invariant_input_is_pvaried_like_psum(mesh8):
    x = values((3,), "float32")  # replicated: psum of an invariant value is n * x
    compare(lambda lib, a: lib.psum(a, "i"), mesh8, [P()], P(), x)


@pytest.mark.parametrize("algorithm", ["direct", "ring", "halving_doubling", "reduce_broadcast"])
def test_every_algorithm_in_jax(mesh8, algorithm):
    x = values((8, 1000), "int64")
    got = run(
        "accl",
        lambda lib, a: jax_accl.allreduce(a, "i", algorithm=algorithm),
        mesh8,
        [P("i")],
        P(),
        x,
    )
    assert_same(got, run("lax", lambda lib, a: lib.psum(a, "i"), mesh8, [P("i")], P(), x))


@pytest.mark.parametrize(
    "algorithm", ["auto", "direct", "ring", "halving_doubling", "reduce_broadcast"]
)
@pytest.mark.parametrize("elements", [1000, 300_000])  # staged one-shot, and in peers' memory
def test_in_place_with_operand_dead_or_still_needed(mesh8, algorithm, elements):
    """The call writes its result into its operand's buffer: when the operand is an
    intermediate nobody needs afterwards (a gradient) XLA hands over that buffer; when it
    is used again (here: added to the result) XLA must keep a copy. Both must be exact."""
    x = values((8, elements), "int32")

    def body(lib, a):
        b = a * 3 + 1  # dead after the all-reduce
        reduce = (
            (lambda v: jax_accl.allreduce(v, "i", algorithm=algorithm))
            if lib is jax_accl
            else (lambda v: lib.psum(v, "i"))
        )
        return reduce(b), reduce(a) + a, a  # `a` is read again after its all-reduce

    got = run("accl", body, mesh8, [P("i")], (P(), P("i"), P("i")), x)
    assert_same(got, run("lax", body, mesh8, [P("i")], (P(), P("i"), P("i")), x))


def test_lowering_declares_in_place(mesh8):
    # Intermediates (a kept argument reads where it lies: test_operand_aliasing.py).
    fn = jax.jit(
        jax.shard_map(
            lambda a, b: jax_accl.psum((a * 2, b * 2), "i"),
            mesh=mesh8,
            in_specs=(P("i"), P("i")),
            out_specs=P(),
        )
    )
    spec = jax.ShapeDtypeStruct(
        (8, 4), np.float32, sharding=jax.sharding.NamedSharding(mesh8, P("i"))
    )
    text = fn.lower(spec, spec).as_text()
    assert "output_operand_aliases" in text
    # Result k aliases operand k: the call has no other operand or result.
    for k in (0, 1):
        assert text.count(f"output_tuple_indices = [{k}], operand_index = {k}") == 1


def test_prod(mesh8):
    x = values((8, 9), "int32")
    got = run("accl", lambda lib, a: jax_accl.allreduce(a, "i", op="prod"), mesh8, [P("i")], P(), x)
    with np.errstate(over="ignore"):
        want = np.multiply.reduce(x, axis=0, dtype=np.int32)
    np.testing.assert_array_equal(np.asarray(got), want[None])


def test_environment_forces_the_algorithm(mesh8, monkeypatch):
    monkeypatch.setenv("JAX_ACCL_ALGORITHM", "halving_doubling")
    jax_accl.reset_stats()
    x = values((8, 4), "float32")
    compare(lambda lib, a: lib.psum(a, "i") * 1.0, mesh8, [P("i")], P(), x)
    calls = jax_accl.stats()["algorithms"]
    assert calls["halving_doubling"]["calls"] == 8
    assert calls["direct"]["calls"] == 0 and calls["ring"]["calls"] == 0


@pytest.mark.parametrize("dtype", ["float32", ml_dtypes.bfloat16, "float16"])
@pytest.mark.parametrize("fn", ["pmax", "pmin"])
def test_pmax_and_pmin_propagate_nan_where_jax_lax_on_cpu_drops_it(mesh8, fn, dtype):
    """Issue 59 (docs/api.md): a NaN on any device makes jax_accl's pmax/pmin NaN there,
    as jnp.max/jnp.min over the devices; jax.lax's on XLA:CPU returns the other
    devices' extreme instead, hiding it. Elsewhere both agree bitwise."""
    x = values((8, 6), dtype, seed=3)
    x[3, 0] = x[0, 1] = x[7, 2] = x[2, 3] = x[5, 3] = np.nan  # first, last, middle, two
    got = np.asarray(run("accl", lambda lib, a: getattr(lib, fn)(a, "i"), mesh8, [P("i")], P(), x))
    lax = np.asarray(run("lax", lambda lib, a: getattr(lib, fn)(a, "i"), mesh8, [P("i")], P(), x))
    reduce = {"pmax": np.max, "pmin": np.min}[fn]
    want = reduce(x.astype(np.float64), axis=0, keepdims=True)  # NaN where any is
    np.testing.assert_array_equal(np.isnan(got.astype(np.float64)), np.isnan(want))
    assert np.isnan(want[0, :4]).all() and not np.isnan(want[0, 4:]).any()
    assert got[0, 4:].tobytes() == lax[0, 4:].tobytes() == want[0, 4:].astype(dtype).tobytes()
    # jax.lax's own behaviour, which docs/api.md states: the NaN dropped (if this fails,
    # jax.lax changed; update docs/api.md).
    assert not np.isnan(lax.astype(np.float64)).any()


@pytest.mark.parametrize("fn", ["psum", "pmax", "pmin"])
def test_reducing_a_value_unreduced_along_another_axis(fn):
    """A reduction over "x" of an einsum's result that is unreduced along "y" (JAX's
    unreduced type, a "high" value from jax 0.12.1 on) on an Explicit (4, 2) mesh: jax.lax's
    values and result type (still unreduced along "y"), computed by jax_accl's all-reduce."""
    from jax.sharding import AxisType, NamedSharding

    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    a = jax.device_put(np.arange(8.0).reshape(4, 2), NamedSharding(mesh, P("x", "y")))
    b = jax.device_put(np.arange(12.0).reshape(2, 6), NamedSharding(mesh, P("y", None)))

    def program(lib):
        @jax.shard_map(in_specs=P("x", unreduced={"y"}), out_specs=P(unreduced={"y"}))
        def reduce(z):
            return getattr(lib, fn)(z, "x")

        def step(x, y):
            summands = jnp.einsum("ab,bc->ac", x, y, out_sharding=P("x", None, unreduced={"y"}))
            out = reduce(summands)
            return out, jax.reshard(out, P())  # the unreduced result, and its sum over "y"

        return jax.jit(step)

    with jax.set_mesh(mesh):
        (got_u, got), (want_u, want) = program(jax_accl)(a, b), program(jax.lax)(a, b)
        assert jax.typeof(got_u) == jax.typeof(want_u), (jax.typeof(got_u), jax.typeof(want_u))
        assert got.sharding == want.sharding
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        assert "accl_allreduce" in program(jax_accl).lower(a, b).compile().as_text()
