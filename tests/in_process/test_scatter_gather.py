"""jax_accl.psum_scatter and jax_accl.all_gather against jax.lax's, in one process of 8
CPU devices: dimensions, tiling, dtypes (integers bitwise), meshes of two axes, axis
index groups, gradients, vmap, and the compiled HLO carrying jax_accl's calls only."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from accl_testing import P, put

import jax_accl

LIBS = {"lax": jax.lax, "accl": jax_accl}


def run(lib, body, mesh, in_spec, out_spec, x, check_vma=True):
    fn = jax.jit(
        jax.shard_map(
            lambda v: body(LIBS[lib], v),
            mesh=mesh,
            in_specs=(in_spec,),
            out_specs=out_spec,
            check_vma=check_vma,
        )
    )
    return fn, np.asarray(fn(put(mesh, x, in_spec)))


def same(body, mesh, in_spec, out_spec, x, check_vma=True, exact=False):
    _, want = run("lax", body, mesh, in_spec, out_spec, x, check_vma)
    fn, got = run("accl", body, mesh, in_spec, out_spec, x, check_vma)
    assert got.shape == want.shape and got.dtype == want.dtype
    if exact:
        assert got.tobytes() == want.tobytes()
    else:  # half precision: summed in another order (or accumulated in float32), an ulp
        half = np.dtype(got.dtype).itemsize == 2
        np.testing.assert_allclose(
            got.astype(np.float64),
            want.astype(np.float64),
            rtol=1.6e-2 if half else 1e-5,
            atol=1e-5,
        )
    return fn


def hlo(fn, mesh, in_spec, x) -> str:
    return fn.lower(put(mesh, x, in_spec)).compile().as_text()


@pytest.mark.parametrize("tiled", [False, True])
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_psum_scatter(mesh8, tiled, dim):
    size = 16 if tiled else 8  # per device along the scatter dimension
    shard = {0: (size, 3, 2), 1: (2, size, 3), 2: (2, 3, size)}[dim]
    x = jnp.arange(8 * np.prod(shard), dtype=jnp.float32).reshape(8 * shard[0], *shard[1:])

    def body(lib, v):
        return lib.psum_scatter(v, "i", scatter_dimension=dim, tiled=tiled)

    fn = same(body, mesh8, P("i"), P("i"), x)
    text = hlo(fn, mesh8, P("i"), x)
    assert "reduce-scatter(" not in text and "all-reduce(" not in text
    assert 'custom_call_target="accl_reduce_scatter"' in text


@pytest.mark.parametrize("tiled", [False, True])
@pytest.mark.parametrize("axis", [0, 1])
def test_all_gather(mesh8, tiled, axis):
    x = jnp.arange(8 * 4 * 5, dtype=jnp.float32).reshape(8 * 4, 5)

    def body(lib, v):
        return lib.all_gather(v, "i", axis=axis, tiled=tiled)

    fn = same(body, mesh8, P("i"), P("i"), x)
    text = hlo(fn, mesh8, P("i"), x)
    assert "all-gather(" not in text and 'custom_call_target="accl_all_gather"' in text


@pytest.mark.parametrize("dtype", ["int8", "int32", "uint16", "int64", "float16", "bfloat16"])
def test_dtypes_integers_bitwise(mesh8, dtype):
    x = (jnp.arange(8 * 16 * 2) % 97).astype(dtype).reshape(8 * 16, 2)

    def body(lib, v):
        return lib.all_gather(lib.psum_scatter(v, "i", tiled=True), "i", tiled=True)

    same(body, mesh8, P("i"), P("i"), x, exact=np.issubdtype(np.dtype(dtype), np.integer))


@pytest.mark.parametrize("axes", [("x", "y"), ("y", "x"), "y"])
def test_two_axis_mesh(axes):
    mesh = jax.make_mesh((2, 4), ("x", "y"))
    x = jnp.arange(8 * 8 * 3, dtype=jnp.int32).reshape(64, 3)

    def body(lib, v):
        scattered = lib.psum_scatter(v, axes, tiled=True)
        return lib.all_gather(scattered * 3, axes, tiled=True)

    same(body, mesh, P(("x", "y")), P(("x", "y")), x, exact=True)


def test_axis_index_groups_with_check_vma_off(mesh8):
    groups = [[0, 2, 4, 6], [1, 3, 5, 7]]
    x = jnp.arange(8 * 8, dtype=jnp.int32).reshape(64, 1)

    def body(lib, v):
        s = lib.psum_scatter(v, "i", axis_index_groups=groups, tiled=True)
        return lib.all_gather(s, "i", axis_index_groups=groups, tiled=True)

    same(body, mesh8, P("i"), P("i"), x, check_vma=False, exact=True)


def test_gradients_flow_through_each_others_transpose(mesh8):
    """FSDP's pattern: parameters all-gathered for use, their gradient reduce-scattered
    (the transpose of the all-gather), all jax_accl's in the compiled step."""
    w = jnp.linspace(-1.0, 1.0, 8 * 4 * 3, dtype=jnp.float32).reshape(32, 3)
    data = jnp.linspace(0.0, 2.0, 8 * 5 * 32, dtype=jnp.float32).reshape(40, 32)

    def step(lib):
        def loss(w_shard, d):
            full = lib.all_gather(w_shard, "i", tiled=True)  # (32, 3)
            return jnp.sum(jnp.tanh(d @ full) ** 2)

        def body(w_shard, d):
            value, grad = jax.value_and_grad(loss)(w_shard, d)
            return jax.lax.psum(value, "i"), grad

        return jax.jit(
            jax.shard_map(body, mesh=mesh8, in_specs=(P("i"), P("i")), out_specs=(P(), P("i")))
        )

    args = (put(mesh8, w, P("i")), put(mesh8, data, P("i")))
    want = step(jax.lax)(*args)
    got = step(jax_accl)(*args)
    np.testing.assert_allclose(np.asarray(got[0]), np.asarray(want[0]), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(got[1]), np.asarray(want[1]), rtol=1e-5, atol=1e-6)
    text = step(jax_accl).lower(*args).compile().as_text()
    assert "all-gather(" not in text and "reduce-scatter(" not in text
    assert 'custom_call_target="accl_all_gather"' in text
    assert 'custom_call_target="accl_reduce_scatter"' in text


def test_vmap_inside_shard_map_and_over_the_vmapped_axis(mesh8):
    x = jnp.arange(8 * 3 * 16, dtype=jnp.float32).reshape(8 * 3, 16)

    def body(lib, v):  # v: (3, 16); vmapped over its last dimension
        g = jax.vmap(lambda col: lib.all_gather(col, "i", tiled=True), in_axes=1, out_axes=1)(v)
        return jax.vmap(lambda col: lib.psum_scatter(col, "i", tiled=True), 1, 1)(g)

    same(body, mesh8, P("i"), P("i"), x)
    # Over the vmapped axis itself (jax.vmap(axis_name=...)): no devices involved.
    y = jnp.arange(4 * 8 * 2, dtype=jnp.float32).reshape(4, 8, 2)
    for lib in LIBS.values():
        got_s = jax.vmap(lambda v: lib.psum_scatter(v, "b", tiled=True), axis_name="b")(y)
        got_g = jax.vmap(lambda v: lib.all_gather(v, "b", tiled=True), axis_name="b")(y)
        if lib is jax.lax:
            want_s, want_g = got_s, got_g
    np.testing.assert_allclose(got_s, want_s)
    np.testing.assert_allclose(got_g, want_g)


def test_errors_name_what_is_wrong(mesh8):
    x = jnp.zeros((8 * 3, 2), jnp.float32)
    with pytest.raises(ValueError, match="divisible by the size of the axes"):
        run("accl", lambda lib, v: lib.psum_scatter(v, "i", tiled=True), mesh8, P("i"), P("i"), x)
    with pytest.raises(ValueError, match="must equal the size of"):
        run("accl", lambda lib, v: lib.psum_scatter(v, "i"), mesh8, P("i"), P("i"), x)
    with pytest.raises(NameError, match="unbound axis name: j"):
        run("accl", lambda lib, v: lib.all_gather(v, "j"), mesh8, P("i"), P("i"), x)
    with pytest.raises(TypeError, match="does not support dtype bool"):
        run(
            "accl",
            lambda lib, v: lib.psum_scatter(v > 0, "i", tiled=True),
            mesh8,
            P("i"),
            P("i"),
            x,
        )
    with pytest.raises(ValueError, match="scatter_dimension 2 is out of range for rank 2"):
        run(
            "accl",
            lambda lib, v: lib.psum_scatter(v, "i", scatter_dimension=2),
            mesh8,
            P("i"),
            P("i"),
            x,
        )
    with pytest.raises(ValueError, match="axis -3 is out of range for rank 2"):
        run(
            "accl",
            lambda lib, v: lib.all_gather(v, "i", axis=-3, tiled=True),
            mesh8,
            P("i"),
            P("i"),
            x,
        )


def test_large_blocks_pytrees_bools_and_no_axes(mesh8):
    """Large blocks (the unstaged path: devices read each other's buffers in place, then
    meet at a barrier), a pytree of two leaves, bool all-gathered as jax.lax does, a
    negative dimension, and no axes (the value itself)."""
    x = jnp.arange(8 * 8 * 40_000, dtype=jnp.int32).reshape(8 * 8, 40_000) % 1013

    def body(lib, v):
        s = lib.psum_scatter({"a": v, "b": v * 2}, "i", scatter_dimension=0, tiled=False)
        flags = lib.all_gather(v[0] > 500, "i")
        g = lib.all_gather(s, "i", axis=-1, tiled=True)
        return g["a"] + g["b"] + flags.sum() + lib.psum_scatter(v, ()).reshape(-1)

    same(body, mesh8, P("i"), P("i"), x, exact=True)


def test_jvp_and_grad_through_psum_scatter(mesh8):
    x = jnp.linspace(-1.0, 1.0, 8 * 16, dtype=jnp.float32).reshape(8 * 16, 1)

    def body(lib, v):
        f = lambda u: jnp.sin(lib.psum_scatter(u * u, "i", tiled=True))  # noqa: E731
        primal, tangent = jax.jvp(f, (v,), (jnp.ones_like(v),))
        grad = jax.grad(lambda u: jnp.sum(f(u)))(v)
        return primal.sum() + tangent.sum() + grad

    fn = same(body, mesh8, P("i"), P("i"), x)
    text = hlo(fn, mesh8, P("i"), x)
    assert 'custom_call_target="accl_all_gather"' in text  # the transpose of the scatter
    assert "all-gather(" not in text and "reduce-scatter(" not in text


def test_all_gather_to_invarying_and_its_slice_transpose(mesh8):
    """to='invarying' (jax.lax.all_gather_invariant): the result is replicated, so it can
    leave through out_specs=P(); its gradient is this device's slice, no data moved."""
    w = jnp.linspace(-1.0, 1.0, 8 * 2 * 3, dtype=jnp.float32).reshape(16, 3)

    def step(lib):
        def body(w_shard):
            full = lib.all_gather(w_shard, "i", tiled=True, to="invarying")
            grad = jax.grad(
                lambda u: jnp.sum(lib.all_gather(u, "i", tiled=True, to="invarying") ** 3)
            )(w_shard)
            return full, grad

        return jax.jit(jax.shard_map(body, mesh=mesh8, in_specs=P("i"), out_specs=(P(), P("i"))))

    x = put(mesh8, w, P("i"))
    (full, grad), (want_full, want_grad) = step(jax_accl)(x), step(jax.lax)(x)
    np.testing.assert_allclose(np.asarray(full), np.asarray(want_full))
    np.testing.assert_allclose(np.asarray(grad), np.asarray(want_grad), rtol=1e-6)
    text = step(jax_accl).lower(x).compile().as_text()
    assert "all-gather(" not in text and 'custom_call_target="accl_all_gather"' in text


def test_reduced_all_gather_and_unreduced_psum_scatter_keep_jaxs_types():
    """JAX's reduced and unreduced types on an Explicit (4, 2) mesh: all_gather(to=
    'reduced') of a sharded value and a sum over "x" (JAX's shard_map test of a reduced
    input), and psum_scatter of an einsum's unreduced result: the values and gradients
    of jax.lax's, the same result shardings, and no XLA all-gather or reduce-scatter
    left (the gather's transpose is a reduce-scatter of unreduced cotangents)."""
    from jax.sharding import AxisType, NamedSharding

    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    arr = jax.device_put(np.arange(32.0).reshape(8, 4), NamedSharding(mesh, P("x", "y")))
    a = jax.device_put(np.arange(8.0).reshape(4, 2), NamedSharding(mesh, P(None, "y")))
    b = jax.device_put(np.arange(12.0).reshape(2, 6), NamedSharding(mesh, P("y", None)))

    def programs(lib):
        @jax.shard_map(out_specs=P(reduced={"y"}))
        def gathered_sum(x):
            seq = lib.all_gather(x, "y", axis=1, tiled=True, to="reduced")
            return lib.psum(jnp.sum(seq), "x")

        @jax.shard_map(in_specs=P(unreduced={"y"}), out_specs=P("y", None))
        def scatter(z):
            return lib.psum_scatter(z, "y", tiled=True)

        def scattered(x, y):
            return scatter(jnp.einsum("ab,bc->ac", x, y, out_sharding=P(unreduced={"y"}))).sum()

        return gathered_sum, jax.grad(gathered_sum), jax.grad(scattered, argnums=(0, 1))

    with jax.set_mesh(mesh):
        ours, theirs = programs(jax_accl), programs(jax.lax)
        for mine, reference, args in zip(ours, theirs, [(arr,), (arr,), (a, b)]):
            got, want = jax.jit(mine)(*args), jax.jit(reference)(*args)
            for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
                assert g.sharding == w.sharding, (g.sharding, w.sharding)
                np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6)
            text = jax.jit(mine).lower(*args).compile().as_text()
            assert "all-gather(" not in text and "reduce-scatter(" not in text
            assert "accl_all_gather" in text or "accl_reduce_scatter" in text
        with jax_accl.patch_psum():  # the jax.lax program routed: the same calls
            for reference, args in zip(theirs, [(arr,), (arr,), (a, b)]):
                text = jax.jit(reference).lower(*args).compile().as_text()
                assert "all-gather(" not in text and "reduce-scatter(" not in text
                assert "accl_all_gather" in text or "accl_reduce_scatter" in text


def test_psum_scatter_of_a_value_unreduced_along_an_auto_axis():
    """In a shard_map manual over "y" only, an einsum's result unreduced along the Explicit
    axis "x" (its low value has a leading dimension for "x"), reduce-scattered over "y":
    the product's rows, once summed over "x". jax.lax fails to lower this program (its
    reduce-scatter takes no such value), on jax 0.10.2 too; before jax 0.12.1 (JAX's high
    types) jax_accl refuses it as well, which is asserted there."""
    from jax.sharding import AxisType, NamedSharding

    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    a, b = np.arange(64.0).reshape(8, 8), np.arange(48.0).reshape(8, 6)

    @jax.shard_map(in_specs=(P("y"), P()), out_specs=P("y"), axis_names={"y"})
    def scattered(x, y):
        z = jnp.einsum("ab,bc->ac", x, y, out_sharding=P(unreduced={"x"}))
        assert jax.typeof(z).sharding.spec.unreduced == {"x"}
        return jax_accl.psum_scatter(z, "y", tiled=True)

    with jax.set_mesh(mesh):
        x = jax.device_put(a, NamedSharding(mesh, P("y", "x")))
        y = jax.device_put(b, NamedSharding(mesh, P("x", None)))
        step = jax.jit(lambda x, y: jax.reshard(scattered(x, y), P("y", None)))
        # Each "y" half of a's rows times b, the halves summed: sum_k a[k*4:(k+1)*4] @ b.
        want = (a[:4] + a[4:]) @ b
        if jax.__version_info__ < (0, 12, 1):
            # jax_accl's partially manual path iterates the operand's spec, which jax
            # 0.10.2 refuses for one with unreduced axes (as its own psum_scatter fails).
            with pytest.raises(ValueError, match="non-empty unreduced"):
                step(x, y)
            return
        np.testing.assert_array_equal(np.asarray(step(x, y)), want)
        assert "accl_reduce_scatter" in step.lower(x, y).compile().as_text()


def test_axis_index_groups_under_check_vma(mesh8):
    groups = [[0, 1, 2, 3], [4, 5, 6, 7]]
    x = jnp.arange(8 * 4 * 2, dtype=jnp.int32).reshape(32, 2)

    def body(lib, v):
        s = lib.psum_scatter(v, "i", axis_index_groups=groups, tiled=True)
        return lib.all_gather(s, "i", axis_index_groups=groups, tiled=True)

    same(body, mesh8, P("i"), P("i"), x, exact=True)


def count_calls(text: str, target: str) -> int:
    return text.count(f'custom_call_target="{target}"')


def test_pytrees_fuse_into_one_call_per_dtype_bucket(mesh8, monkeypatch):
    """A pytree of leaves of two dtypes and several shapes (scatter dimension 1, tiled
    and not, large and small): one reduce-scatter, all-gather and permutation per dtype
    in the compiled step, results bitwise jax.lax's; gradients (each other's transposes)
    fused the same way; and a fusion cap below a leaf's size splits its buckets."""
    ints = jnp.arange(8 * 16 * 3000, dtype=jnp.int32).reshape(8 * 16, 3000) % 997
    shift = [(i, (i + 1) % 8) for i in range(8)]

    def body(lib, v):
        tree = {
            "big": v,
            "small": v[:8, :5] * 3,
            "cols": v[:3, :64],  # scattered along dimension 1
            "f": (v[:16, :4] // 7).astype(jnp.float32),  # integral: sums exact
            "f2": (v[:8, :1] // 3).astype(jnp.float32),
        }
        dims = {"big": 0, "small": 0, "cols": 1, "f": 0, "f2": 0}
        scattered = {
            k: lib.psum_scatter(tree[k], "i", scatter_dimension=dims[k], tiled=True)
            for k in ("cols",)
        }
        scattered.update(
            lib.psum_scatter({k: tree[k] for k in tree if k != "cols"}, "i", tiled=True)
        )
        gathered = lib.all_gather(scattered, "i", tiled=True)
        moved = lib.ppermute(gathered, "i", shift)
        return jnp.concatenate([jnp.ravel(moved[k]).astype(jnp.float32) for k in sorted(moved)])[
            None
        ]

    fn = same(body, mesh8, P("i"), P("i"), ints, exact=True)
    text = hlo(fn, mesh8, P("i"), ints)
    assert "all-gather(" not in text and "reduce-scatter(" not in text
    assert "collective-permute" not in text
    # "cols", scattered on its own, fused with the other int32 leaves before lowering
    assert count_calls(text, "accl_reduce_scatter") == 2  # int32 and float32 leaves
    assert count_calls(text, "accl_all_gather") == 2  # int32 and float32 leaves
    assert count_calls(text, "accl_ppermute") == 2

    def grads(lib):
        def loss(tree):
            full = lib.all_gather(tree, "i", tiled=True)
            return sum(jnp.sum(jnp.sin(leaf) ** 2) for leaf in jax.tree_util.tree_leaves(full))

        return jax.jit(
            jax.shard_map(jax.grad(loss), mesh=mesh8, in_specs=(P("i"),), out_specs=P("i"))
        )

    params = {
        "w": jnp.linspace(-1, 1, 8 * 6 * 5, dtype=jnp.float32).reshape(48, 5),
        "b": jnp.linspace(0, 2, 8 * 3, dtype=jnp.float32),
    }
    placed = jax.tree_util.tree_map(lambda a: put(mesh8, a, P("i")), params)
    want, got = grads(jax.lax)(placed), grads(jax_accl)(placed)
    for k in params:
        np.testing.assert_allclose(np.asarray(got[k]), np.asarray(want[k]), rtol=1e-5, atol=1e-6)
    text = grads(jax_accl).lower(placed).compile().as_text()
    assert count_calls(text, "accl_all_gather") == 1
    assert count_calls(text, "accl_reduce_scatter") == 1  # the transpose, fused too
    assert "all-gather(" not in text and "reduce-scatter(" not in text

    monkeypatch.setenv("JAX_ACCL_FUSION_BYTES", "64")  # below each leaf: a call per leaf
    text = grads(jax_accl).lower(placed).compile().as_text()
    assert count_calls(text, "accl_all_gather") == 2
    assert count_calls(text, "accl_reduce_scatter") == 2  # the transposes split alike
    got = grads(jax_accl)(placed)
    for k in params:
        np.testing.assert_allclose(np.asarray(got[k]), np.asarray(want[k]), rtol=1e-5, atol=1e-6)


def test_stats_count_each_collective_of_a_step(mesh8):
    """stats()["collectives"]: a program with one reduce-scatter, all-gather, permutation
    and all-reduce counts one call of each per device, each with its operand's bytes;
    the per-algorithm counters hold the same calls in all."""
    x = jnp.ones((64, 512), jnp.float32)
    shift = [(i, (i + 1) % 8) for i in range(8)]

    def body(lib, v):
        return (
            lib.psum_scatter(v, "i", tiled=True),
            lib.all_gather(v, "i", tiled=True),
            lib.ppermute(v, "i", shift),
            lib.psum(v * 2, "i"),
        )

    fn = jax.jit(
        jax_accl.shard_map(
            lambda v: body(jax.lax, v), mesh=mesh8, in_specs=(P("i"),), out_specs=P("i")
        )
    )
    arg = put(mesh8, x, P("i"))
    jax.block_until_ready(fn(arg))  # compiled, warmed up
    jax_accl.reset_stats()
    jax.block_until_ready(fn(arg))
    stats = jax_accl.stats()
    per_device = 8 * 512 * 4
    for kind in ("reduce-scatter", "all-gather", "permute", "all-reduce"):
        counted = stats["collectives"][kind]
        assert counted["calls"] == 8 and counted["errors"] == 0, (kind, counted)
        assert counted["bytes"] == 8 * per_device and counted["seconds"] > 0, (kind, counted)
    assert sum(a["calls"] for a in stats["algorithms"].values()) == 4 * 8
