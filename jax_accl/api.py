"""Public collectives: drop-in replacements for jax.lax.psum / pmean / pmax / pmin."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax, tree_util

from jax_accl import _compat as c
from jax_accl import config, names, routing
from jax_accl.primitives import allreduce as prim

_jax_psum = lax.psum  # JAX's own, even while patch_psum() is active


def _axes_tuple(axis_name) -> tuple:
    return tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)


def allreduce(x, axis_name, *, op: str = "sum", algorithm: str = "auto", axis_index_groups=None):
    """All-reduce every leaf of ``x`` over ``axis_name`` with ``op`` (sum, prod, min, max).

    ``algorithm`` forces one of ``jax_accl.names.ALGORITHMS``: direct, ring,
    halving_doubling, reduce_broadcast (shared memory within a process; across the
    processes of one host, by cross-memory attach) or hierarchical (across processes);
    "auto" lets the cost model choose (or ``JAX_ACCL_ALGORITHM`` force one for the run).
    """
    if op not in names.OPS:
        raise ValueError(f"jax_accl.allreduce: op must be one of {tuple(names.OPS)}, got {op!r}")
    if algorithm not in names.ALGORITHMS:
        raise ValueError(
            f"jax_accl.allreduce: algorithm must be one of {names.ALGORITHMS}, got {algorithm!r}"
        )
    api_name = names.API_NAMES[op]
    axes = c.skip_size_one_axes(_axes_tuple(axis_name))
    if not axes:
        return x
    if any(isinstance(a, int) for a in axes) and axis_index_groups is not None:
        raise ValueError("axis_index_groups only supported for sums over just named axes")
    c.validate_axis_index_groups(axis_index_groups)
    groups = c.canonicalize_axis_index_groups(axis_index_groups)
    leaves, treedef = tree_util.tree_flatten(x)
    if op == "sum":  # as jax.lax.psum: booleans are summed as int32
        leaves = [
            lax.convert_element_type(leaf, np.int32) if np.result_type(leaf) == np.bool_ else leaf
            for leaf in leaves
        ]
    if op in c.STATE_CHECKED_OPS and c.check_vma_enabled():  # one state along all axes
        mesh_named = tuple(a for a in axes if a in c.mesh_axis_names())
        for leaf in leaves:
            if mesh_named and isinstance(leaf, c.core.Tracer):
                c.value_state_along(c.core.typeof(leaf), mesh_named, f"jax_accl.{api_name}")
    out = reduce_leaves(leaves, axes, op=op, groups=groups, algorithm=algorithm)
    return tree_util.tree_unflatten(treedef, out)


def reduce_leaves(
    leaves: list, axes: tuple, *, op: str, groups=None, algorithm: str = "auto", invariant=None
) -> list:
    """All-reduces each leaf over `axes` (mesh, vmapped and positional axes mixed), one
    native call per bucket of leaves that share dtype and reduced axes.

    Under check_vma=True (or `invariant=True`) each leaf is reduced only along the mesh
    axes it varies on; along the others its copies are identical, so they are folded
    locally (a sum multiplies by their size, max and min keep the value), as jax.lax
    computes them, without communication. The result is invariant along all `axes`.
    """
    named = tuple(a for a in axes if not isinstance(a, int))
    positional = tuple(a for a in axes if isinstance(a, int))
    if all(not isinstance(leaf, c.core.Tracer) for leaf in leaves):
        # Constants (e.g. psum(1, "i") to get an axis size) need no communication.
        size = len(groups[0]) if groups is not None else _axes_size(named)
        out = []
        for leaf in leaves:
            leaf = _reduce_positional(leaf, positional, op)
            out.append(
                prim._repeat_reduce(jnp.asarray(leaf), size, op)
                if op != "sum"
                else c.const_like(leaf, size) * leaf
            )
        return out
    leaves = [_reduce_positional(leaf, positional, op) for leaf in leaves]
    if not named:
        return leaves
    invariant = c.check_vma_enabled() if invariant is None else invariant
    mesh_axes = c.mesh_axis_names()
    out = list(leaves)
    by_axes: dict = {}  # reduced axes -> [(index, leaf)]; then folded along `copies`
    copies: dict = {}
    for k, leaf in enumerate(leaves):
        reduced, same = named, ()
        if invariant and any(a in mesh_axes for a in named):
            aval = c.core.typeof(leaf)
            if set(named) & c.unreduced_axes(aval):  # JAX's own unreduced types
                out[k] = _jax_psum(leaf, named)
                continue
            varying = c.varying_axes(aval)
            reduced = tuple(a for a in named if a not in mesh_axes or a in varying)
            same = tuple(a for a in named if a in mesh_axes and a not in varying)
        if same and not any(a in mesh_axes for a in reduced):  # no communication
            leaf, same = _fold(jnp.asarray(leaf), same, op), ()
            if not reduced:
                out[k] = leaf
                continue
        copies[k] = same
        by_axes.setdefault(reduced, []).append((k, jnp.asarray(leaf)))
    for reduced, indexed in by_axes.items():
        for bucket in fusion_buckets(indexed, config.current().fusion_bytes):
            results = prim.bind(
                [leaf for _, leaf in bucket],
                axes=reduced,
                axis_index_groups=groups,
                op=op,
                algorithm=algorithm,
                invariant=invariant,
            )
            for (k, _), result in zip(bucket, results):
                out[k] = _fold(result, copies[k], op)
    return out


def _axes_size(names) -> int:
    return math.prod(c.core.get_axis_env().axis_size(name) for name in names)


def _fold(v, same_along: tuple, op: str):
    """The reduction of the identical copies of v along the axes `same_along`."""
    return prim._repeat_reduce(v, _axes_size(same_along), op) if same_along else v


def fusion_buckets(indexed_leaves, limit_bytes: int):
    """Groups (index, leaf) pairs into buckets of one dtype and at most `limit_bytes`
    (a leaf larger than the limit gets a bucket of its own), keeping leaf order within
    each dtype. Each bucket becomes one native call (as Horovod's tensor fusion)."""
    by_dtype: dict = {}
    for k, leaf in indexed_leaves:
        by_dtype.setdefault(np.dtype(leaf.dtype), []).append((k, leaf))
    buckets = []
    for items in by_dtype.values():
        current, size = [], 0
        for k, leaf in items:
            nbytes = leaf.size * np.dtype(leaf.dtype).itemsize
            if current and size + nbytes > limit_bytes:
                buckets.append(current)
                current, size = [], 0
            current.append((k, leaf))
            size += nbytes
        if current:
            buckets.append(current)
    return buckets


def _reduce_positional(leaf, positional, op):
    if not positional:
        return leaf
    ndim = np.ndim(leaf)
    return prim.positional_reduce(jnp.asarray(leaf), [a % ndim for a in positional], op)


def shard_map(f=None, /, **kwargs):
    """:func:`jax.shard_map` whose every all-reduce is jax_accl's: the collectives traced
    in `f` (``jax.lax.psum`` & co as well as ``jax_accl.psum``) and the gradient
    all-reduces autodiff makes of it (of replicated inputs, under check_vma=True),
    wherever the gradient is taken. Takes jax.shard_map's arguments."""
    if f is None:
        return functools.partial(shard_map, **kwargs)
    return jax.shard_map(routing.routed(f), **kwargs)


def psum(x, axis_name, *, axis_index_groups=None):
    """Drop-in for :func:`jax.lax.psum`, computed by jax_accl's native all-reduce."""
    return allreduce(x, axis_name, op="sum", axis_index_groups=axis_index_groups)


def pmax(x, axis_name, *, axis_index_groups=None):
    """Drop-in for :func:`jax.lax.pmax`."""
    return allreduce(x, axis_name, op="max", axis_index_groups=axis_index_groups)


def pmin(x, axis_name, *, axis_index_groups=None):
    """Drop-in for :func:`jax.lax.pmin`."""
    return allreduce(x, axis_name, op="min", axis_index_groups=axis_index_groups)


def pmean(x, axis_name, *, axis_index_groups=None):
    """Drop-in for :func:`jax.lax.pmean`: psum divided by the group size."""
    total = psum(x, axis_name, axis_index_groups=axis_index_groups)
    n = psum(1, axis_name, axis_index_groups=axis_index_groups)
    return tree_util.tree_map(lambda v: v / n, total)
