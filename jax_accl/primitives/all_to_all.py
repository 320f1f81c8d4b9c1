"""The ``accl_all_to_all`` primitive: an all-to-all of a bucket of arrays (one dtype) in
one native call, each in canonical form: dimension 0 holds n blocks (n = the size of the
axes), block b for rank b; rank r's result holds the n blocks sent to it, block q from
rank q. The public ``jax_accl.all_to_all`` (jax_accl/all_to_all.py) moves jax.lax's
split and concat dimensions around it.

Varying -> varying (under ``check_vma=True`` the input must vary along the axes; the
caller inserts the pvary, as jax.lax does). Linear, and its own transpose (applied twice
it gives every block back). Over a vmapped axis, a transpose of the batch dimension and
dimension 0. The lowering is jax_accl/primitives/lowering.py."""

from __future__ import annotations

from functools import partial

import jax.numpy as jnp
from jax import lax

from jax_accl import _compat as c
from jax_accl.primitives.allreduce import check_varying_bucket, next_op_id

accl_all_to_all_p = c.core.Primitive("accl_all_to_all")
accl_all_to_all_p.multiple_results = True  # one call moves a bucket of leaves


def bind(xs, *, axes: tuple, axis_index_groups, axis_size: int) -> list:
    if not xs:
        return []
    return accl_all_to_all_p.bind(
        *xs,
        axes=axes,
        axis_index_groups=axis_index_groups,
        axis_size=axis_size,
        op_id=next_op_id(),
    )


def _abstract_eval(*avals, axes, axis_index_groups, axis_size, op_id):
    c.check_axis_names(axes, "all_to_all")
    check_varying_bucket(avals, axes, "jax_accl.all_to_all")
    for aval in avals:
        if aval.ndim == 0 or aval.shape[0] != axis_size:
            raise ValueError(
                f"jax_accl.all_to_all: dimension 0 must hold one block per rank of {axes} "
                f"({axis_size}), got shape {aval.shape}"
            )
    return list(avals), {c.core.NamedAxisEffect(axis) for axis in axes}


def _batcher(axis_data, vals_in, dims_in, *, axes, axis_index_groups, axis_size, op_id):
    params = dict(axes=axes, axis_index_groups=axis_index_groups, axis_size=axis_size)
    if axis_data.name not in axes:
        # The blocks are dimension 0: each batch dimension goes after it.
        xs = [x if d is None else jnp.moveaxis(x, d, 1) for x, d in zip(vals_in, dims_in)]
        return bind(xs, **params), [None if d is None else 1 for d in dims_in]
    if axis_index_groups is not None or len(axes) > 1:
        raise NotImplementedError(
            "jax_accl.all_to_all over a vmapped axis: only that one axis, without axis_index_groups"
        )
    return [_over_vmapped_axis(axis_data.size, x, d) for x, d in zip(vals_in, dims_in)], [
        0 for _ in vals_in
    ]


def _over_vmapped_axis(n: int, x, d):
    """The all-to-all over the vmapped axis itself: "rank" v's block q is rank q's block
    v, a swap of the batch dimension and the blocks' on the stacked slices."""
    stacked = lax.broadcast(x, (n,)) if d is None else jnp.moveaxis(x, d, 0)  # (n, n, ...)
    return jnp.swapaxes(stacked, 0, 1)


def _jvp(primals, tangents, *, axes, axis_index_groups, axis_size, op_id):
    params = dict(axes=axes, axis_index_groups=axis_index_groups, axis_size=axis_size)
    outs = bind(list(primals), **params)
    zeros = [c.ad.Zero(c.core.typeof(o).to_tangent_aval()) for o in outs]
    return outs, c.move_nonzero(tangents, lambda ts: bind(ts, **params), zeros)


def _transpose(cts, *xs, axes, axis_index_groups, axis_size, op_id):
    params = dict(axes=axes, axis_index_groups=axis_index_groups, axis_size=axis_size)

    def move(live):
        return bind([c.insert_collective_pvary(axes, ct) for ct in live], **params)

    return c.move_nonzero(cts, move, [c.ad.Zero(c.ct_aval(x.aval)) for x in xs])


accl_all_to_all_p.def_impl(partial(c.dispatch.apply_primitive, accl_all_to_all_p))
accl_all_to_all_p.def_effectful_abstract_eval(_abstract_eval)
c.batching.fancy_primitive_batchers[accl_all_to_all_p] = _batcher
c.ad.primitive_jvps[accl_all_to_all_p] = _jvp
c.ad.primitive_transposes[accl_all_to_all_p] = _transpose
