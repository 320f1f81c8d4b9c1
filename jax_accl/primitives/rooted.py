"""The rooted primitives, each a bucket of arrays (one dtype) in one native call:

* ``accl_broadcast``: every device of the group gets the root's arrays;
* ``accl_reduce``: the root gets the reduction (``op``) of every device's arrays, the
  other devices zeros.

``root`` is an index along ``axes`` (as jax.lax.axis_index numbers them). Varying ->
varying, as ppermute (the values agree after a broadcast, the type still varies). Both
are linear (a reduce only for op='sum') and each is the other's transpose: a broadcast
sends x_root to every y_r, so the cotangent of x_root is the sum of every y_r's (a reduce
to the root), and every other x_r gets zero; a reduce makes y_root the sum of every x_r,
so every x_r's cotangent is y_root's (a broadcast from the root). Over a vmapped axis
they are a take (a sum) along the batch dimension. Each lowers to its FFI target
(accl_broadcast, accl_reduce) with the root as its one argument."""

from __future__ import annotations

from functools import partial

import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_accl import _compat as c
from jax_accl.primitives import lowering
from jax_accl.primitives.allreduce import check_varying_bucket, next_op_id, positional_reduce

accl_broadcast_p = c.core.Primitive("accl_broadcast")
accl_broadcast_p.multiple_results = True
accl_reduce_p = c.core.Primitive("accl_reduce")
accl_reduce_p.multiple_results = True

API = {accl_broadcast_p: "jax_accl.broadcast", accl_reduce_p: "jax_accl.reduce"}


def bind_broadcast(xs, *, axes: tuple, root: int) -> list:
    if not xs:
        return []
    return accl_broadcast_p.bind(*xs, axes=axes, root=root, op="sum", op_id=next_op_id())


def bind_reduce(xs, *, axes: tuple, root: int, op: str) -> list:
    if not xs:
        return []
    return accl_reduce_p.bind(*xs, axes=axes, root=root, op=op, op_id=next_op_id())


def _abstract_eval(*avals, axes, root, op, op_id, primitive):
    api = API[primitive]
    c.check_axis_names(axes, api.removeprefix("jax_accl."))
    check_varying_bucket(avals, axes, api)
    for aval in avals:
        if op in ("min", "max") and np.issubdtype(aval.dtype, np.complexfloating):
            raise TypeError(f"{api}: {op} is not defined for complex dtype {aval.dtype}")
    return list(avals), {c.core.NamedAxisEffect(axis) for axis in axes}


def _broadcast_batched(x, d, root):
    if d is None:  # already the same at every position
        return x
    picked = lax.index_in_dim(x, root, axis=d, keepdims=True)
    return lax.broadcast_in_dim(picked, x.shape, tuple(range(x.ndim)))


def _reduce_batched(x, d, root, size, op):
    """The reduction along the batch dimension at position `root`, zeros elsewhere; an
    unbatched x (the same at every position) gets a batch dimension first."""
    x = lax.broadcast(x, (size,)) if d is None else jnp.moveaxis(x, d, 0)
    total = positional_reduce(x, [0], op)
    at_root = lax.broadcasted_iota(np.int32, x.shape, 0) == root
    out = jnp.where(at_root, total[None], jnp.zeros_like(x))
    return out if d is None else jnp.moveaxis(out, 0, d)


def _batcher(axis_data, vals_in, dims_in, *, axes, root, op, op_id, primitive):
    params = dict(axes=axes, root=root, op=op, op_id=next_op_id())
    if axis_data.name not in axes:
        return primitive.bind(*vals_in, **params), list(dims_in)
    if len(axes) > 1:
        raise NotImplementedError(
            f"{API[primitive]} over a vmapped axis and other axes at once is not supported"
        )
    size = axis_data.size
    if primitive is accl_broadcast_p:
        return [_broadcast_batched(x, d, root) for x, d in zip(vals_in, dims_in)], list(dims_in)
    outs = [_reduce_batched(x, d, root, size, op) for x, d in zip(vals_in, dims_in)]
    return outs, [0 if d is None else d for d in dims_in]


def _move(primitive, values, *, axes, root, op):
    """One call of `primitive` on `values` (cotangents or tangents, made varying)."""
    xs = [c.insert_collective_pvary(axes, v) for v in values]
    if primitive is accl_broadcast_p:
        return bind_broadcast(xs, axes=axes, root=root)
    return bind_reduce(xs, axes=axes, root=root, op=op)


def _jvp(primals, tangents, *, axes, root, op, op_id, primitive):
    if op != "sum":
        raise NotImplementedError(
            f"Differentiation rule for '{primitive.name}' with op={op!r} is not implemented"
        )
    outs = primitive.bind(*primals, axes=axes, root=root, op=op, op_id=next_op_id())
    zeros = [c.ad.Zero(c.core.typeof(o).to_tangent_aval()) for o in outs]
    move = partial(_move, primitive, axes=axes, root=root, op=op)
    return outs, c.move_nonzero(tangents, move, zeros)


_TRANSPOSE = {accl_broadcast_p: accl_reduce_p, accl_reduce_p: accl_broadcast_p}


def _transpose(cts, *xs, axes, root, op, op_id, primitive):
    move = partial(_move, _TRANSPOSE[primitive], axes=axes, root=root, op="sum")
    return c.move_nonzero(cts, move, [c.ad.Zero(c.ct_aval(x.aval)) for x in xs])


for _p in API:
    _p.def_impl(partial(c.dispatch.apply_primitive, _p))
    _p.def_effectful_abstract_eval(partial(_abstract_eval, primitive=_p))
    c.batching.fancy_primitive_batchers[_p] = partial(_batcher, primitive=_p)
    c.ad.primitive_jvps[_p] = partial(_jvp, primitive=_p)
    c.ad.primitive_transposes[_p] = partial(_transpose, primitive=_p)


def _lowering(ctx, *xs, axes, root, op, op_id, primitive):
    """`root` (an index along the axes) is the same rank of every group (its members in
    axis_index order, as jax.lax.psum's groups list them); each result aliases its
    operand (the native call works in place)."""
    api = API[primitive]
    params = dict(axes=axes, root=root, op=op, op_id=op_id)
    if c.is_partial_manual(ctx):
        return lowering.lower_per_shard(ctx, xs, api, lambda *v: primitive.bind(*v, **params))
    groups = c.replica_groups(ctx.module_context.axis_context, axes, None)
    if not all(0 <= root < len(g) for g in groups):
        raise ValueError(f"{api}: root {root} is outside a group of {min(map(len, groups))}")
    devices = lowering.device_ids(ctx, groups)
    return lowering.emit_data_call(
        ctx,
        xs,
        primitive.name,
        api,
        axes,
        groups,
        devices,
        op_id,
        "direct",
        aliases={k: k for k in range(len(xs))},
        op=op,
        args=[root],
    )


for _p in API:
    # Not cacheable (as every jax_accl call: primitives/lowering.py).
    c.mlir.register_lowering(_p, partial(_lowering, primitive=_p), platform="cpu", cacheable=False)
