"""The leaf-reduction engine behind every jax_accl all-reduce: a list of leaves reduced
over named, vmapped and positional axes, bucketed by dtype (tensor fusion) and bound as
``accl_allreduce`` calls. The public functions (jax_accl/api.py), the routed jax.lax
collectives (jax_accl/routing.py) and the transpose of ``accl_pvary``
(jax_accl/primitives/pvary.py) all reduce through ``reduce_leaves``.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_accl import _compat as c
from jax_accl import config, fallback_warning, routing_state, wire_dtype
from jax_accl.primitives import allreduce as prim
from jax_accl.primitives import pvary as accl_pvary

_jax_psum = lax.psum  # JAX's own, even while patch_psum() is active


def reduce_leaves(
    leaves: list,
    axes: tuple,
    *,
    op: str,
    groups=None,
    algorithm: str = "auto",
    invariant=None,
    wire=None,
) -> list:
    """All-reduces each leaf over `axes` (mesh, vmapped and positional axes mixed), one
    native call per bucket of leaves that share dtype.

    Under check_vma=True (or `invariant=True`) the result is invariant along the reduced
    mesh axes. A leaf typed invariant along some of them is reduced over them all the
    same, its buffers communicated and summed (maxed, mined), as jax.lax computes it:
    with jax_auto_pcast on (JAX's default) it is first cast to varying there (pvary,
    jax_accl's), and with it off jax.lax's type check decides (it refuses where jax.lax
    does). The copies are not assumed equal: a replicated input's per-device buffers can
    differ (JAX's fault-tolerance example sends the weights to a process that came back
    by such a psum). Only constants (no tracer) are folded without communication, as
    jax.lax.psum folds them.

    `wire`: the dtype float32 leaves travel as (jax_accl/wire_dtype.py), checked by the
    caller; None: JAX_ACCL_WIRE_DTYPE's for sums. Only what travels is rounded.
    """
    named = tuple(a for a in axes if not isinstance(a, int))
    positional = tuple(a for a in axes if isinstance(a, int))
    if all(not isinstance(leaf, c.core.Tracer) for leaf in leaves) and _equal_groups(groups):
        # Constants (e.g. psum(1, "i") to get an axis size) need no communication.
        size = len(groups[0]) if groups is not None else _axes_size(named)
        out = []
        for leaf in leaves:
            leaf = _reduce_positional(leaf, positional, op)
            out.append(
                prim.repeat_reduce(jnp.asarray(leaf), size, op)
                if op != "sum"
                else c.const_like(leaf, size) * leaf
            )
        return out
    leaves = [_reduce_positional(leaf, positional, op) for leaf in leaves]
    if not named:
        return leaves
    invariant = c.check_vma_enabled() if invariant is None else invariant
    wire = wire_dtype.resolve(None, op, "") if wire is None else wire
    mesh_named = tuple(a for a in named if a in c.mesh_axis_names())
    out = list(leaves)
    indexed = []
    for k, leaf in enumerate(leaves):
        leaf = jnp.asarray(leaf)
        if invariant and mesh_named:
            aval = c.core.typeof(leaf)
            if set(named) & c.unreduced_axes(aval):  # JAX's own unreduced types
                out[k] = _jax_psum(leaf, named)
                continue
            leaf = _varying_along(leaf, mesh_named)
        indexed.append((k, leaf))
    for bucket in fusion_buckets(indexed, config.current().fusion_bytes):
        results = prim.bind(
            [leaf for _, leaf in bucket],
            axes=named,
            axis_index_groups=groups,
            op=op,
            algorithm=algorithm,
            invariant=invariant,
            wire=wire is not None and wire_dtype.compressed(bucket[0][1].dtype),
        )
        for (k, _), result in zip(bucket, results):
            out[k] = result
    return out


def _varying_along(leaf, mesh_axes: tuple):
    """`leaf` as jax.lax's reductions take it under check_vma=True: with jax_auto_pcast on,
    cast to varying along the reduced mesh axes it is invariant along (jax_accl's pvary,
    whose transpose is jax_accl's all-reduce); with it off, as it is, or refused with
    jax.lax's error where jax.lax refuses it (jax 0.10: invariant along all of them;
    jax 0.12: along any)."""
    missing = tuple(a for a in mesh_axes if a not in c.varying_axes(c.core.typeof(leaf)))
    if not missing:
        return leaf
    if not c.auto_pcast_enabled():
        c.check_psum_invariant(leaf, mesh_axes)
        return leaf
    return accl_pvary.bind(leaf, axes=missing)


def _equal_groups(groups) -> bool:
    """Whether constants are folded over `groups`: where they are all of one size, as jax
    0.12's psum (jax 0.10 folds groups of other sizes too, with the first's size)."""
    return groups is None or all(len(g) == len(groups[0]) for g in groups)


def _axes_size(names) -> int:
    return math.prod(c.core.get_axis_env().axis_size(name) for name in names)


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


def bind_in_buckets(arrays: list, bind) -> list:
    """`bind(bucket)` (one native call, a result per array) over the fusion buckets of
    `arrays` (one dtype each, at most JAX_ACCL_FUSION_BYTES); the results in order."""
    out = [None] * len(arrays)
    for bucket in fusion_buckets(list(enumerate(arrays)), config.current().fusion_bytes):
        for (k, _), result in zip(bucket, bind([a for _, a in bucket])):
            out[k] = result
    return out


def _reduce_positional(leaf, positional, op):
    if not positional:
        return leaf
    ndim = np.ndim(leaf)
    return prim.positional_reduce(jnp.asarray(leaf), [a % ndim for a in positional], op)


def warn_unless_routed(api: str) -> None:
    """A jax_accl collective traced in a plain jax.shard_map body (check_vma=True, routing
    off): noted, and warned of once the program is lowered if it holds XLA all-reduces
    beside it (jax_accl/fallback_warning.py): the gradient all-reduces autodiff makes of
    replicated inputs inside the body stay XLA's. (A gradient taken outside the
    shard_map, whose differentiated part holds jax_accl calls, is routed: routing's
    shard_map transpose.)"""
    if c.check_vma_enabled() and not routing_state.active():
        fallback_warning.note_traced(api)


# accl_pvary's transpose: the cotangent's all-reduce, ours.
accl_pvary.set_transpose_sum(
    lambda ct, axes: reduce_leaves([ct], axes, op="sum", invariant=True)[0]
)
