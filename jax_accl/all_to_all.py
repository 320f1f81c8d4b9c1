"""Drop-ins for jax.lax.all_to_all and jax.lax.ragged_all_to_all (the latter's
primitive: jax_accl/primitives/ragged_all_to_all.py). all_to_all is computed by
jax_accl's native all-to-all: a pytree's
leaves in one call per bucket (one dtype, at most JAX_ACCL_FUSION_BYTES). Each leaf's
split dimension is cut into its n blocks and moved to the front around the canonical
primitive (jax_accl/primitives/all_to_all.py), and the blocks received are put back
along the concat dimension: a reshape where those dimensions lead (the usual expert-
parallel layout), a transpose XLA makes elsewhere."""

from __future__ import annotations

import jax.numpy as jnp

from jax_accl import _compat as c
from jax_accl.primitives import all_to_all as prim
from jax_accl.primitives import ragged_all_to_all as ragged
from jax_accl.reduction import warn_unless_routed
from jax_accl.scatter_gather import _axes_and_size, _dimension, _in_buckets


def all_to_all(x, axis_name, split_axis, concat_axis, *, axis_index_groups=None, tiled=False):
    """Drop-in for :func:`jax.lax.all_to_all`: ``x``'s dimension ``split_axis`` is cut
    into one block per device along ``axis_name`` (its size must be the axes' size, or,
    ``tiled``, a multiple of it), block b sent to device b; the blocks received are
    stacked in a new dimension ``concat_axis`` of the result (concatenated along it,
    ``tiled``), in device order."""
    axes, n, groups = _axes_and_size(axis_name, axis_index_groups, "all_to_all")
    if not axes:
        return x
    warn_unless_routed("jax_accl.all_to_all")

    def front(leaf):  # (n blocks along dimension 0, the leaf's shape)
        leaf = c.insert_collective_pvary(axes, jnp.asarray(leaf))
        if leaf.ndim == 0:
            raise ValueError("jax_accl.all_to_all: the operand must have at least one dimension")
        split = _dimension(split_axis, leaf.ndim, "all_to_all", "split_axis")
        size = leaf.shape[split]
        if (size % n) if tiled else (size != n):
            raise ValueError(
                f"jax_accl.all_to_all: the split axis's size {size} must "
                f"{'be divisible by' if tiled else 'equal'} the size of {axes}, {n}"
            )
        blocks = leaf.reshape((*leaf.shape[:split], n, size // n, *leaf.shape[split + 1 :]))
        blocks = jnp.moveaxis(blocks, split, 0)  # (n, ..., size / n at split, ...)
        return (blocks if tiled else blocks.squeeze(split + 1)), leaf.ndim

    def back(out, ndim):  # out: (n, the leaf's shape without its split blocks)
        concat = _dimension(concat_axis, ndim, "all_to_all", "concat_axis")
        stacked = jnp.moveaxis(out, 0, concat)
        if not tiled:
            return stacked
        shape = stacked.shape
        return stacked.reshape((*shape[:concat], n * shape[concat + 1], *shape[concat + 2 :]))

    return _in_buckets(
        x, front, back, lambda b: prim.bind(b, axes=axes, axis_index_groups=groups, axis_size=n)
    )


def ragged_all_to_all(
    operand,
    output,
    input_offsets,
    send_sizes,
    output_offsets,
    recv_sizes,
    *,
    axis_name,
    axis_index_groups=None,
):
    """Drop-in for :func:`jax.lax.ragged_all_to_all`: slice i of ``operand`` (rows
    ``input_offsets[i]`` to ``+ send_sizes[i]``) goes to device ``i // (K / n)`` along
    ``axis_name``, written there at row ``output_offsets[i]`` of its ``output``; the
    result is this device's ``output`` with the rows it received (``recv_sizes[i]`` from
    each slice of its peers). A slice outside the operand or a receiver's output, or
    sizes the receivers do not expect, is an error naming the rank and the slice."""
    axes, n, groups = _axes_and_size(axis_name, axis_index_groups, "ragged_all_to_all")
    warn_unless_routed("jax_accl.ragged_all_to_all")
    sizes = tuple(jnp.asarray(s) for s in (input_offsets, send_sizes, output_offsets, recv_sizes))
    return ragged.bind(
        jnp.asarray(operand),
        jnp.asarray(output),
        sizes,
        axes=axes,
        axis_index_groups=groups,
        axis_size=n,
    )
