"""Drop-in for jax.lax.ppermute, computed by jax_accl's native permutation (a
pytree's leaves in one call per bucket of one dtype: one message each way per leaf, or
in one process a copy read in place)."""

from __future__ import annotations

import jax.numpy as jnp
from jax import tree_util

from jax_accl import _compat as c
from jax_accl import axis_names
from jax_accl.primitives import permute as prim
from jax_accl.reduction import bind_in_buckets, warn_unless_routed


def ppermute(x, axis_name, perm):
    """Drop-in for :func:`jax.lax.ppermute`: each ``(source, destination)`` pair of
    ``perm`` (indices along ``axis_name``) sends the source's ``x`` to the destination;
    a device that no pair sends to gets zeros. Sources and destinations are unique."""
    axes = tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)
    perm = tuple((int(src), int(dst)) for src, dst in perm)
    if not axes:
        return x
    axis_names.check_bound(axes, "ppermute")
    warn_unless_routed("jax_accl.ppermute")
    srcs, dsts = [s for s, _ in perm], [d for _, d in perm]
    if len(set(srcs)) != len(srcs) or len(set(dsts)) != len(dsts):
        raise ValueError(f"jax_accl.ppermute: sources and destinations must be unique, got {perm}")

    leaves, treedef = tree_util.tree_flatten(x)
    leaves = [c.insert_collective_pvary(axes, jnp.asarray(leaf)) for leaf in leaves]
    moved = bind_in_buckets(leaves, lambda bucket: prim.bind(bucket, axes=axes, perm=perm))
    return tree_util.tree_unflatten(treedef, moved)
