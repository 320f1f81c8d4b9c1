"""Run the same shard_map program with jax.lax and with jax_accl, and compare."""

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax_accl

LIBS = {"lax": jax.lax, "accl": jax_accl}


def put(mesh, x, spec):
    """Places x (an array, or a pytree with a matching pytree of specs) on the mesh."""
    if isinstance(spec, P):
        return jax.device_put(x, NamedSharding(mesh, spec))
    return jax.tree.map(
        lambda leaf, s: jax.device_put(leaf, NamedSharding(mesh, s)),
        x,
        spec,
        is_leaf=lambda v: isinstance(v, P),
    )


def run(lib, body, mesh, in_specs, out_specs, *args, check_vma=True):
    """jit(shard_map(body(lib, ...))) on args placed by in_specs."""
    args = [put(mesh, a, s) for a, s in zip(args, in_specs)]
    fn = jax.shard_map(
        lambda *xs: body(LIBS[lib], *xs),
        mesh=mesh,
        in_specs=tuple(in_specs),
        out_specs=out_specs,
        check_vma=check_vma,
    )
    return jax.jit(fn)(*args)


def assert_same(got, want, exact=None):
    """Integers and booleans bitwise; floats to a tolerance fitting their precision."""
    got_leaves, got_tree = jax.tree.flatten(got)
    want_leaves, want_tree = jax.tree.flatten(want)
    assert got_tree == want_tree
    for g, w in zip(got_leaves, want_leaves):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        if exact or g.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w)
        else:
            tol = {2: 2e-2, 4: 1e-5, 8: 1e-12, 16: 1e-12}[g.dtype.itemsize]
            if g.dtype == np.complex64:
                tol = 1e-5
            np.testing.assert_allclose(
                g.astype(np.complex128), w.astype(np.complex128), rtol=tol, atol=tol
            )


def compare(body, mesh, in_specs, out_specs, *args, check_vma=True):
    got = run("accl", body, mesh, in_specs, out_specs, *args, check_vma=check_vma)
    want = run("lax", body, mesh, in_specs, out_specs, *args, check_vma=check_vma)
    assert_same(got, want)
    return got


def values(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


__all__ = ["P", "assert_same", "compare", "put", "run", "values"]
