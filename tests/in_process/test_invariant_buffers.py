"""A reduction of a leaf typed invariant (replicated) along the reduced axes sums each
device's actual buffer, as jax.lax does (it pvaries the leaf, then all-reduces), on the
routed path and through jax_accl's own functions: the buffers of an input declared P()
can differ (JAX's fault-tolerance example relies on it to send the weights to a process
that came back)."""

import jax
import numpy as np
import pytest
from accl_testing import P, assert_same, put

import jax_accl

FNS = ["psum", "pmean", "pmax", "pmin"]


def differing_replicated(mesh, per_device: np.ndarray):
    """A P() array whose buffer on the mesh's k-th device is per_device[k] (the type says
    replicated; the buffers differ)."""
    devices = list(mesh.devices.flat)
    sharding = jax.sharding.NamedSharding(mesh, P())
    shards = [jax.device_put(per_device[k], d) for k, d in enumerate(devices)]
    return jax.make_array_from_single_device_arrays(per_device.shape[1:], sharding, shards)


def per_device(x) -> np.ndarray:
    """Each device's buffer of x, in the order of x's devices' ids."""
    shards = sorted(x.addressable_shards, key=lambda s: s.device.id)
    return np.stack([np.asarray(s.data) for s in shards])


def program(mesh, body, how: str, in_specs=(P(),), out_specs=P()):
    """jit(shard_map(body)): jax_accl.shard_map's (routed) or jax.shard_map's."""
    shard_map = jax_accl.shard_map if how == "routed" else jax.shard_map
    return jax.jit(shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs))


def lax_or_accl(fn: str, how: str):
    """jax_accl's function for "direct"; jax.lax's otherwise (routed or not)."""
    return getattr(jax_accl if how == "direct" else jax.lax, fn)


def buffers(mesh, dtype, seed=0):
    rng = np.random.default_rng(seed)
    n = mesh.devices.size
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-1000, 1000, (n, 5, 3)).astype(dtype)
    return rng.standard_normal((n, 5, 3)).astype(dtype)


@pytest.mark.parametrize("how", ["routed", "direct"])
@pytest.mark.parametrize("fn", FNS)
@pytest.mark.parametrize("dtype", ["int32", "float32"])
def test_replicated_input_with_differing_buffers(mesh8, how, fn, dtype):
    if fn == "pmean" and dtype == "int32":
        dtype = "float32"
    data = buffers(mesh8, dtype)
    x = differing_replicated(mesh8, data)

    got = program(mesh8, lambda a: lax_or_accl(fn, how)(a, "i"), how)(x)
    want = program(mesh8, lambda a: getattr(jax.lax, fn)(a, "i"), "lax")(x)
    want_np = {"psum": data.sum(0), "pmean": data.mean(0), "pmax": data.max(0), "pmin": data.min(0)}
    # jax.lax communicates: every device holds the reduction of all the buffers.
    for buf in per_device(want):
        assert_same(buf, want_np[fn].astype(dtype))
    assert_same(per_device(got), per_device(want), exact=dtype == "int32" or fn in ("pmax", "pmin"))


@pytest.mark.parametrize("how", ["routed", "direct"])
@pytest.mark.parametrize("fn", FNS)
def test_partly_replicated_over_two_axes(how, fn):
    """Varying along "a", typed invariant along "b" with differing buffers there: where
    jax.lax reduces it over both axes (pmax and pmin on jax 0.10), all 8 buffers are
    reduced, as jax.lax's; where it refuses the mixed state (psum; pmax and pmin from
    jax 0.12 on), jax_accl refuses it too."""
    mesh = jax.make_mesh((4, 2), ("a", "b"))
    data = buffers(mesh, "int32", seed=4) if fn != "pmean" else buffers(mesh, "float32", 4)
    devices = list(mesh.devices.flat)
    sharding = jax.sharding.NamedSharding(mesh, P("a"))
    shards = [jax.device_put(data[k], d) for k, d in enumerate(devices)]
    x = jax.make_array_from_single_device_arrays((4 * 5, 3), sharding, shards)
    specs = ((P("a"),), P())
    lax_fn = program(mesh, lambda v: getattr(jax.lax, fn)(v, ("a", "b")), "lax", *specs)
    accl_fn = program(mesh, lambda v: lax_or_accl(fn, how)(v, ("a", "b")), how, *specs)
    try:
        want = lax_fn(x)
    except ValueError as refused:
        with pytest.raises(ValueError, match="state"):
            accl_fn(x)
        assert "state" in str(refused)
        return
    reduce = {"psum": np.sum, "pmean": np.mean, "pmax": np.max, "pmin": np.min}[fn]
    np.testing.assert_array_equal(per_device(want)[3], reduce(data, 0).astype(data.dtype))
    assert_same(per_device(accl_fn(x)), per_device(want), exact=fn != "pmean")


@pytest.mark.parametrize("how", ["routed", "direct"])
def test_compiled_program_carries_it_on_accl(mesh8, how):
    """The invariant leaf's sum is jax_accl's custom call in the compiled program, and no
    XLA all-reduce is left."""
    x = differing_replicated(mesh8, buffers(mesh8, "float32"))
    fn = program(mesh8, lambda a: lax_or_accl("psum", how)(a, "i"), how)
    hlo = fn.lower(x).compile().as_text()
    assert "all-reduce(" not in hlo
    assert hlo.count('custom_call_target="accl_allreduce"') == 1


@pytest.mark.parametrize("how", ["routed", "direct"])
def test_gradient_of_psum_of_replicated_input(mesh8, how):
    """d/dx sum(psum(x)) for a replicated x: JAX's transpose sums the cotangent again
    (the transpose of the pvary it inserted); jax_accl's does the same."""
    x = differing_replicated(mesh8, buffers(mesh8, "float32"))

    def loss(lib):
        def f(a):
            return jax.shard_map(
                lambda v: lib.psum(v, "i").sum(), mesh=mesh8, in_specs=(P(),), out_specs=P()
            )(a)

        return f

    got_fn = loss(jax_accl) if how == "direct" else jax_accl.routed(loss(jax.lax))
    got = jax.jit(jax.grad(got_fn))(x)
    want = jax.jit(jax.grad(loss(jax.lax)))(x)
    assert_same(per_device(got), per_device(want))


def test_auto_pcast_off_refuses_where_jax_lax_refuses(mesh8):
    """With jax_auto_pcast off, jax.lax.psum of a value invariant along the axis is a type
    error (no pvary is inserted); jax_accl's and the routed one raise the same."""
    x = differing_replicated(mesh8, buffers(mesh8, "float32"))
    from jax._src import config

    with config.auto_pcast(False):
        for how in ("lax", "routed", "direct"):
            fn = program(mesh8, lambda a, h=how: lax_or_accl("psum", h)(a, "i"), how)
            with pytest.raises(ValueError, match="variant->invariant"):
                fn(x)


def test_constants_are_folded_as_jax_lax_folds_them(mesh8):
    """psum & co of a constant need no communication (as jax.lax's): no custom call."""

    def body(lib):
        return lambda a: (a, lib.psum(3, "i"), lib.pmean(2.0, "i"), lib.pmax(5, "i"))

    specs = ((P("i"),), (P("i"), P(), P(), P()))
    x = put(mesh8, np.arange(8.0, dtype=np.float32), P("i"))
    accl = program(mesh8, body(jax_accl), "lax", *specs)
    assert_same(accl(x), program(mesh8, body(jax.lax), "lax", *specs)(x), exact=True)
    assert "accl_allreduce" not in accl.lower(x).compile().as_text()


def test_constants_over_groups_of_different_sizes(mesh8):
    """psum of a constant over axis_index_groups of different sizes (check_vma=False) is
    each group's size, as jax 0.12's jax.lax.psum computes it (it folds constants only
    over groups of one size; jax 0.10 folded them with the first group's size everywhere)."""
    groups = [[0, 5], [1, 2, 3, 4, 6, 7]]
    x = put(mesh8, np.arange(8.0, dtype=np.float32), P("i"))

    def body(lib):
        return lambda a: a * 0 + lib.psum(1, "i", axis_index_groups=groups)

    specs = dict(mesh=mesh8, in_specs=P("i"), out_specs=P("i"), check_vma=False)
    got = np.asarray(jax.jit(jax.shard_map(body(jax_accl), **specs))(x))
    np.testing.assert_array_equal(got, [2, 6, 6, 6, 6, 2, 6, 6])
    if tuple(int(v) for v in jax.__version__.split(".")[:2]) >= (0, 12):
        want = np.asarray(jax.jit(jax.shard_map(body(jax.lax), **specs))(x))
        np.testing.assert_array_equal(got, want)
