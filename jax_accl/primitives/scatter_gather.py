"""The ``accl_reduce_scatter`` and ``accl_all_gather`` primitives: one array each, in
canonical form (the collective acts on dimension 0, tiled), each the other's transpose.

Order (as mpi4jax): primitive, bind helper, abstract eval, batching, transpose,
registration; the lowering is jax_accl/primitives/lowering.py. The public
``jax_accl.psum_scatter`` and ``jax_accl.all_gather`` (jax_accl/scatter_gather.py) move
the scatter or gather dimension to 0 around these. Semantics follow
jax.lax.psum_scatter and jax.lax.all_gather:

* reduce-scatter: dimension 0 of the input holds n blocks (n = the size of the axes);
  rank r gets the sum over every rank of its block r;
* all-gather: dimension 0 of the output is the n ranks' inputs, in rank order;
* both are varying -> varying: under ``check_vma=True`` the input must vary along the
  axes (the caller inserts the pvary, as jax.lax does) and the output keeps its type;
* both are linear; a reduce-scatter transposes to an all-gather and back;
* over a vmapped axis, both are local operations on the batch dimension.
"""

from __future__ import annotations

from functools import partial

import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_accl import _compat as c
from jax_accl.primitives.allreduce import SUPPORTED_DTYPES, next_op_id

accl_reduce_scatter_p = c.core.Primitive("accl_reduce_scatter")
accl_all_gather_p = c.core.Primitive("accl_all_gather")

API = {accl_reduce_scatter_p: "jax_accl.psum_scatter", accl_all_gather_p: "jax_accl.all_gather"}


def bind(primitive, x, *, axes: tuple, axis_index_groups, axis_size: int, invariant=False):
    """`invariant` (all-gather only): the result is invariant along `axes`
    (jax.lax.all_gather_invariant), and the transpose a slice of this device's block."""
    return primitive.bind(
        x,
        axes=axes,
        axis_index_groups=axis_index_groups,
        axis_size=axis_size,
        invariant=invariant,
        op_id=next_op_id(),
    )


def _abstract_eval(primitive, aval, *, axes, axis_index_groups, axis_size, invariant, op_id):
    api = API[primitive]
    c.check_axis_names(axes, api.split(".")[1])
    dtype = np.dtype(aval.dtype)
    # An all-gather moves any element type; a reduce-scatter sums (not bool, as jax.lax).
    if dtype not in SUPPORTED_DTYPES or (dtype == np.bool_ and primitive is accl_reduce_scatter_p):
        raise TypeError(f"{api} does not support dtype {dtype}")
    if aval.ndim == 0:
        raise ValueError(f"{api}: the operand must have at least one dimension")
    shape = list(aval.shape)
    if primitive is accl_reduce_scatter_p:
        if shape[0] % axis_size:
            raise ValueError(
                f"{api}: the scatter dimension's size {shape[0]} must be divisible by the "
                f"size of the axes {axes}, {axis_size}"
            )
        shape[0] //= axis_size
    else:
        shape[0] *= axis_size
    if c.check_vma_enabled() and not set(axes) <= c.varying_axes(aval):
        raise ValueError(
            f"{api} must be applied to a value that varies along {axes}, but it varies "
            f"along {set(c.varying_axes(aval))}"
        )
    effects = {c.core.NamedAxisEffect(axis) for axis in axes}
    out = aval.update(shape=tuple(shape))
    if invariant and c.check_vma_enabled():
        out = c.with_varying_axes(out, frozenset(c.varying_axes(aval) - set(axes)))
    return out, effects


def _batcher(
    primitive, axis_data, vals_in, dims_in, *, axes, axis_index_groups, axis_size, invariant, op_id
):
    (x,), (d,) = vals_in, dims_in
    params = dict(
        axes=axes, axis_index_groups=axis_index_groups, axis_size=axis_size, invariant=invariant
    )
    if axis_data.name not in axes:
        if d is None:
            return bind(primitive, x, **params), None
        # The collective acts on dimension 0: the batch dimension goes after it.
        x = jnp.moveaxis(x, d, 1)
        return bind(primitive, x, **params), 1
    if axis_index_groups is not None or len(axes) > 1:
        raise NotImplementedError(
            f"{API[primitive]} over a vmapped axis: only that one axis, without "
            "axis_index_groups (as jax.lax)"
        )
    n = axis_data.size
    # Every "rank" of the vmapped axis is a slice of the batch dimension: stack them first.
    stacked = lax.broadcast(x, (n,)) if d is None else jnp.moveaxis(x, d, 0)  # (n, *x.shape)
    if primitive is accl_reduce_scatter_p:  # rank b: the sum over b' of block b of x_b'
        total = lax.reduce_sum(stacked, (0,))
        return total.reshape((n, total.shape[0] // n, *total.shape[1:])), 0
    gathered = stacked.reshape((n * stacked.shape[1], *stacked.shape[2:]))
    return gathered, None  # every rank's inputs, the same for all of them


def _jvp(primitive, primals, tangents, *, axes, axis_index_groups, axis_size, invariant, op_id):
    params = dict(
        axes=axes, axis_index_groups=axis_index_groups, axis_size=axis_size, invariant=invariant
    )
    (x,), (t,) = primals, tangents
    out = bind(primitive, x, **params)
    if type(t) is c.ad.Zero:
        return out, c.ad.Zero(c.core.get_aval(out).to_tangent_aval())
    return out, bind(primitive, c.ad.instantiate_zeros(t), **params)


def _transpose(primitive, ct, x, *, axes, axis_index_groups, axis_size, invariant, op_id):
    if type(ct) is c.ad.Zero:
        return [c.ad.Zero(c.ct_aval(x.aval))]
    if invariant:  # every device holds the whole cotangent: its own block, no data moves
        block = ct.shape[0] // axis_size
        return [lax.dynamic_slice_in_dim(ct, lax.axis_index(axes) * block, block, axis=0)]
    other = accl_all_gather_p if primitive is accl_reduce_scatter_p else accl_reduce_scatter_p
    return [bind(other, ct, axes=axes, axis_index_groups=axis_index_groups, axis_size=axis_size)]


for _p in (accl_reduce_scatter_p, accl_all_gather_p):
    _p.def_impl(partial(c.dispatch.apply_primitive, _p))
    _p.def_effectful_abstract_eval(partial(_abstract_eval, _p))
    c.batching.fancy_primitive_batchers[_p] = partial(_batcher, _p)
    c.ad.primitive_jvps[_p] = partial(_jvp, _p)
    c.ad.primitive_transposes[_p] = partial(_transpose, _p)
