"""broadcast and reduce: the rooted collectives (primitives/rooted.py), a pytree's leaves
in one native call per bucket of one dtype.

What a JAX user writes by hand with a psum of a masked value:

    broadcast(x, axis, root) == psum(where(axis_index(axis) == root, x, 0), axis)
    reduce(x, axis, root)    == where(axis_index(axis) == root, psum(x, axis), 0)

but moving only the root's data (a broadcast) or only to the root (a reduce)."""

from __future__ import annotations

import operator

import jax
import jax.numpy as jnp
from jax import tree_util

from jax_accl import _compat as c
from jax_accl import axis_names
from jax_accl.names import OPS
from jax_accl.primitives import rooted as prim
from jax_accl.reduction import bind_in_buckets, warn_unless_routed


def _axes(axis_name) -> tuple:
    return tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)


def _checked_root(root, axes: tuple, api: str) -> int:
    """`root` as an int in [0, the size of `axes`), or an error naming both."""
    try:
        index = operator.index(root)
    except TypeError:
        raise TypeError(f"jax_accl.{api}: root must be an int, got {root!r}") from None
    size = jax.lax.axis_size(axes)
    if not 0 <= index < size:
        raise ValueError(
            f"jax_accl.{api}: root {index} is outside axis {axes if len(axes) > 1 else axes[0]!r}"
            f" of size {size} (a root is an index in [0, {size}))"
        )
    return index


def _rooted(x, axis_name, root, api: str, bind):
    """`bind(bucket, axes, root)` over the fusion buckets of x's leaves (made varying
    along the axes), the root checked first; x's tree back."""
    axes = _axes(axis_name)
    if not axes:
        return x
    axis_names.check_bound(axes, api)
    root = _checked_root(root, axes, api)
    warn_unless_routed(f"jax_accl.{api}")
    leaves, treedef = tree_util.tree_flatten(x)
    leaves = [c.insert_collective_pvary(axes, jnp.asarray(leaf)) for leaf in leaves]
    moved = bind_in_buckets(leaves, lambda bucket: bind(bucket, axes, root))
    return tree_util.tree_unflatten(treedef, moved)


def broadcast(x, axis_name, root: int):
    """Every device of the group along ``axis_name`` gets the ``x`` of the device at
    index ``root`` along it (a pytree; jax.lax.axis_index's numbering): a psum of x
    masked to the root, or multihost_utils.broadcast_one_to_all, in one native call. The
    result varies along the axes (as ppermute's), though its values agree. Its transpose
    is a reduce to the root."""
    bind = lambda bucket, axes, root: prim.bind_broadcast(bucket, axes=axes, root=root)  # noqa: E731
    return _rooted(x, axis_name, root, "broadcast", bind)


def reduce(x, axis_name, root: int, op: str = "sum"):
    """The device at index ``root`` along ``axis_name`` gets the reduction (``op``: sum,
    prod, min or max) of every device's ``x`` (a pytree), as a psum would give it there;
    every other device gets zeros (so a sum is where(axis_index == root, psum(x), 0), and
    reduce and broadcast are each other's transpose). Differentiable for op='sum'."""
    if op not in OPS:
        raise ValueError(f"jax_accl.reduce: op must be one of {OPS}, got {op!r}")
    bind = lambda bucket, axes, root: prim.bind_reduce(bucket, axes=axes, root=root, op=op)  # noqa: E731
    return _rooted(x, axis_name, root, "reduce", bind)
