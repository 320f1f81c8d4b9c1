"""Drop-ins for jax.lax.psum_scatter and jax.lax.all_gather, computed by jax_accl's
native reduce-scatter and all-gather: a pytree's leaves in one call per bucket (one
dtype, at most JAX_ACCL_FUSION_BYTES, as a fused psum's). The scatter or gather
dimension is moved to the front around the canonical primitives
(jax_accl/primitives/scatter_gather.py), which act on dimension 0."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import tree_util

from jax_accl import _compat as c
from jax_accl import axis_names
from jax_accl.primitives import scatter_gather as prim
from jax_accl.reduction import bind_in_buckets, warn_unless_routed


def _axes_and_size(axis_name, axis_index_groups, api: str) -> tuple[tuple, int, object]:
    axes = tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)
    if not axes:
        return axes, 1, None
    axis_names.check_bound(axes, api)
    groups = c.canonicalize_axis_index_groups(axis_index_groups)
    if groups is not None:
        size = len(groups[0])
        if any(len(g) != size for g in groups):
            raise ValueError(f"jax_accl.{api}: axis_index_groups must all have one size")
    else:
        size = jax.lax.axis_size(axes)
    return axes, size, groups


def _dimension(dim: int, ndim: int, api: str, what: str) -> int:
    """`dim` in range(ndim), counting from the end if negative, or a clear error."""
    if not -ndim <= dim < ndim:
        raise ValueError(f"jax_accl.{api}: {what} {dim} is out of range for rank {ndim}")
    return dim % ndim


def psum_scatter(x, axis_name, *, scatter_dimension=0, axis_index_groups=None, tiled=False):
    """Drop-in for :func:`jax.lax.psum_scatter`: the sum over ``axis_name``, of which
    each device keeps its block along ``scatter_dimension`` (tiled) or its index of it
    (not tiled: that dimension's size must be the axes' size, and it is dropped)."""
    axes, n, groups = _axes_and_size(axis_name, axis_index_groups, "psum_scatter")
    if not axes:
        return x
    warn_unless_routed("jax_accl.psum_scatter")

    def front(leaf):  # (the canonical operand, the scatter dimension)
        leaf = jnp.asarray(leaf)
        if not _unreduced(leaf, axes):  # an unreduced value is summed as it is
            leaf = c.insert_collective_pvary(axes, leaf)
        dim = _dimension(scatter_dimension, leaf.ndim, "psum_scatter", "scatter_dimension")
        if not tiled and leaf.shape[dim] != n:
            raise ValueError(
                f"jax_accl.psum_scatter: the scatter dimension's size {leaf.shape[dim]} must "
                f"equal the size of {axes}, {n} (or pass tiled=True)"
            )
        return jnp.moveaxis(leaf, dim, 0), dim

    def back(out, dim):
        return out[0] if not tiled else jnp.moveaxis(out, 0, dim)

    params = dict(axes=axes, axis_index_groups=groups, axis_size=n)

    def bind(bucket):  # unreduced leaves (JAX's unreduced types) in calls of their own
        unreduced = [_unreduced(v, axes) for v in bucket]
        if any(unreduced) and groups is not None:
            raise NotImplementedError(
                "jax_accl.psum_scatter of an unreduced value with axis_index_groups (as jax.lax)"
            )
        outs = list(bucket)
        for kind in (False, True):
            mine = [k for k, u in enumerate(unreduced) if u == kind]
            results = prim.bind(
                prim.accl_reduce_scatter_p, [bucket[k] for k in mine], reduced=kind, **params
            )
            for k, r in zip(mine, results):
                outs[k] = r
        return outs

    return _in_buckets(x, front, back, bind)


def _unreduced(leaf, axes) -> bool:
    """Whether `leaf` has JAX's unreduced type along any of `axes` (a partial sum on each
    device, as an einsum with an unreduced out_sharding leaves it)."""
    return bool(set(axes) & c.unreduced_axes(c.core.typeof(leaf)))


def _in_buckets(tree, front, back, bind):
    """Each leaf of `tree` in canonical form (`front`: (operand, dimension)), moved by
    `bind` in one call per bucket, and put back in its shape (`back`)."""
    leaves, treedef = tree_util.tree_flatten(tree)
    fronts = [front(leaf) for leaf in leaves]
    outs = bind_in_buckets([f for f, _ in fronts], bind)
    return tree_util.tree_unflatten(treedef, [back(o, d) for o, (_, d) in zip(outs, fronts)])


def all_gather(x, axis_name, *, axis_index_groups=None, axis=0, tiled=False, to="varying"):
    """Drop-in for :func:`jax.lax.all_gather`: every device's ``x`` along ``axis_name``,
    stacked in a new dimension ``axis`` (or concatenated along ``axis``, tiled).
    ``to="invarying"`` (jax.lax.all_gather_invariant) makes the result invariant along
    the axes, its transpose then a slice; ``to="reduced"`` gives it JAX's reduced type
    there, its transpose a reduce-scatter of the unreduced cotangents."""
    if to not in ("varying", "invarying", "reduced"):
        raise ValueError(
            f"jax_accl.all_gather: `to` must be 'varying', 'invarying' or 'reduced', got {to!r}"
        )
    if to != "varying" and axis_index_groups is not None:
        raise NotImplementedError(
            f"jax_accl.all_gather: to={to!r} with axis_index_groups (as jax.lax)"
        )
    axes, n, groups = _axes_and_size(axis_name, axis_index_groups, "all_gather")
    if not axes:
        return x
    warn_unless_routed("jax_accl.all_gather")

    def front(leaf):  # (the canonical operand, the gather dimension)
        leaf = c.insert_collective_pvary(axes, jnp.asarray(leaf))
        if tiled:
            if leaf.ndim == 0:
                raise ValueError("jax_accl.all_gather: tiled=True needs an operand of rank >= 1")
            dim = _dimension(axis, leaf.ndim, "all_gather", "axis")
            return jnp.moveaxis(leaf, dim, 0), dim
        dim = _dimension(axis, leaf.ndim + 1, "all_gather", "axis")
        return leaf[None], dim  # (1, ...): gathered to (n, ...)

    params = dict(
        axes=axes,
        axis_index_groups=groups,
        axis_size=n,
        invariant=to == "invarying",
        reduced=to == "reduced",
    )
    return _in_buckets(
        x,
        front,
        lambda out, dim: jnp.moveaxis(out, 0, dim),
        lambda b: prim.bind(prim.accl_all_gather_p, b, **params),
    )
