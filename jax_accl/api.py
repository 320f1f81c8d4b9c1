"""Public collectives: drop-in replacements for jax.lax.psum / pmean / pmax / pmin."""

from __future__ import annotations

import functools

import jax
import numpy as np
from jax import lax, tree_util

from jax_accl import _compat as c
from jax_accl import axis_names, names, reduction, routing, wire_dtype


def _axes_tuple(axis_name) -> tuple:
    return tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)


def allreduce(
    x,
    axis_name,
    *,
    op: str = "sum",
    algorithm: str = "auto",
    axis_index_groups=None,
    wire_dtype=None,
):
    """All-reduce every leaf of ``x`` over ``axis_name`` with ``op`` (sum, prod, min, max).

    ``algorithm`` forces one of ``jax_accl.names.ALGORITHMS``: direct, ring,
    halving_doubling, reduce_broadcast (shared memory within a process; across the
    processes of one host, by cross-memory attach) or hierarchical (across processes);
    "auto" lets the cost model choose (or ``JAX_ACCL_ALGORITHM`` force one for the run).
    ``wire_dtype=jnp.bfloat16`` (sums of float32 only): the values travel as bfloat16,
    half the bytes, the result rounded alike on every rank (jax_accl/wire_dtype.py);
    None: as ``JAX_ACCL_WIRE_DTYPE`` says (default: as they are).
    """
    if op not in names.OPS:
        raise ValueError(f"jax_accl.allreduce: op must be one of {tuple(names.OPS)}, got {op!r}")
    if algorithm not in names.ALGORITHMS:
        raise ValueError(
            f"jax_accl.allreduce: algorithm must be one of {names.ALGORITHMS}, got {algorithm!r}"
        )
    return _reduce(x, axis_name, op, algorithm, axis_index_groups, names.API_NAMES[op], wire_dtype)


def _reduce(x, axis_name, op: str, algorithm: str, axis_index_groups, api_name: str, wire=None):
    """allreduce(), its errors and warnings naming the public function called (api_name:
    pmean's psums are "pmean"); `wire`: the wire_dtype asked for (None: the knob's)."""
    if wire is not None:
        wire = wire_dtype.resolve(wire, op, api_name)
    axis_names.check_bound(_axes_tuple(axis_name), api_name)
    axes = c.skip_size_one_axes(_axes_tuple(axis_name))
    if not axes:
        return x
    if any(isinstance(a, int) for a in axes) and axis_index_groups is not None:
        raise ValueError("axis_index_groups only supported for sums over just named axes")
    c.validate_axis_index_groups(axis_index_groups)
    groups = c.canonicalize_axis_index_groups(axis_index_groups)
    leaves, treedef = tree_util.tree_flatten(x)
    if wire is not None:
        wire_dtype.check_leaves(leaves, api_name)
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
    reduction.warn_unless_routed(f"jax_accl.{api_name}")
    out = reduction.reduce_leaves(
        leaves, axes, op=op, groups=groups, algorithm=algorithm, wire=wire
    )
    return tree_util.tree_unflatten(treedef, out)


def shard_map(f=None, /, **kwargs):
    """:func:`jax.shard_map` whose every all-reduce is jax_accl's: the collectives traced
    in `f` (``jax.lax.psum`` & co as well as ``jax_accl.psum``) and the gradient
    all-reduces autodiff makes of it (of replicated inputs, under check_vma=True),
    wherever the gradient is taken. Takes jax.shard_map's arguments."""
    if f is None:
        return functools.partial(shard_map, **kwargs)
    return jax.shard_map(routing.routed(f), **kwargs)


def psum(x, axis_name, *, axis_index_groups=None, wire_dtype=None):
    """Drop-in for :func:`jax.lax.psum`, computed by jax_accl's native all-reduce;
    ``wire_dtype=jnp.bfloat16``: float32 values travel as bfloat16 (see allreduce)."""
    return allreduce(
        x, axis_name, op="sum", axis_index_groups=axis_index_groups, wire_dtype=wire_dtype
    )


def pmax(x, axis_name, *, axis_index_groups=None):
    """Drop-in for :func:`jax.lax.pmax`."""
    return allreduce(x, axis_name, op="max", axis_index_groups=axis_index_groups)


def pmin(x, axis_name, *, axis_index_groups=None):
    """Drop-in for :func:`jax.lax.pmin`."""
    return allreduce(x, axis_name, op="min", axis_index_groups=axis_index_groups)


def pmean(x, axis_name, *, axis_index_groups=None, wire_dtype=None):
    """Drop-in for :func:`jax.lax.pmean`: psum divided by the group size (``wire_dtype``
    as psum's)."""
    total = _reduce(x, axis_name, "sum", "auto", axis_index_groups, "pmean", wire_dtype)
    n = _reduce(1, axis_name, "sum", "auto", axis_index_groups, "pmean")
    return tree_util.tree_map(lambda v: v / n, total)
