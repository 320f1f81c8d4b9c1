"""The ``accl_reduce_scatter`` and ``accl_all_gather`` primitives: a bucket of arrays of
one dtype in one native call, each in canonical form (the collective acts on its
dimension 0, tiled), each primitive the other's transpose.

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
* ``reduced`` (JAX's reduced and unreduced types): an all-gather from varying to
  reduced (jax.lax.all_gather(to='reduced'): the result is replicated along the axes
  and typed reduced there), and a reduce-scatter from unreduced (each device holds a
  partial sum along the axes) to varying, each the other's transpose;
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
for _p in (accl_reduce_scatter_p, accl_all_gather_p):
    _p.multiple_results = True  # one call moves a bucket of leaves

API = {accl_reduce_scatter_p: "jax_accl.psum_scatter", accl_all_gather_p: "jax_accl.all_gather"}


def bind(
    primitive,
    xs,
    *,
    axes: tuple,
    axis_index_groups,
    axis_size: int,
    invariant=False,
    reduced=False,
):
    """The collective of every array of `xs` (one dtype) in one call; a list of results.
    `invariant` (all-gather only): the results are invariant along `axes`
    (jax.lax.all_gather_invariant), and the transpose a slice of this device's block.
    `reduced`: an all-gather's results are reduced along `axes`, a reduce-scatter's
    operands unreduced there (see the module doc)."""
    if not xs:
        return []
    return primitive.bind(
        *xs,
        axes=axes,
        axis_index_groups=axis_index_groups,
        axis_size=axis_size,
        invariant=invariant,
        reduced=reduced,
        op_id=next_op_id(),
    )


def _abstract_eval(
    primitive, *avals, axes, axis_index_groups, axis_size, invariant, reduced, op_id
):
    api = API[primitive]
    c.check_axis_names(axes, api.split(".")[1])
    if len({np.dtype(a.dtype) for a in avals}) > 1:
        raise TypeError(f"{api}: one call moves arrays of one dtype, got {avals}")
    outs = [
        _abstract_one(primitive, api, aval, axes, axis_size, invariant, reduced) for aval in avals
    ]
    return outs, {c.core.NamedAxisEffect(axis) for axis in axes}


def _abstract_one(primitive, api, aval, axes, axis_size, invariant, reduced):
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
    if reduced:
        return _reduced_type(primitive, api, aval.update(shape=tuple(shape)), aval, axes)
    if c.check_vma_enabled() and not set(axes) <= c.varying_axes(aval):
        raise ValueError(
            f"{api} must be applied to a value that varies along {axes}, but it varies "
            f"along {set(c.varying_axes(aval))}"
        )
    out = aval.update(shape=tuple(shape))
    if invariant and c.check_vma_enabled():
        out = c.with_varying_axes(out, frozenset(c.varying_axes(aval) - set(axes)))
    return out


def _reduced_type(primitive, api, out, aval, axes):
    """The result type of a `reduced` call (JAX's rules): an all-gather takes a value
    varying along the axes and not reduced there, and makes it reduced, no longer
    varying; a reduce-scatter takes a value unreduced along the axes and not varying
    there, and makes it varying, no longer unreduced."""
    mat, named = aval.mat, set(axes)
    if primitive is accl_all_gather_p:
        if not named <= mat.varying or named & mat.reduced:
            raise ValueError(
                f"{api}(to='reduced') must be applied to a value that varies along {axes} "
                f"and is not reduced there, got {aval.str_short(True)}"
            )
        kind = mat.update(varying=mat.varying - named, reduced=mat.reduced | named)
    else:
        if not named <= c.unreduced_axes(aval) or named & mat.varying:
            raise ValueError(
                f"{api} of an unreduced value must be unreduced along all of {axes} and "
                f"vary along none of them, got {aval.str_short(True)}"
            )
        unreduced = mat.unreduced - named
        changed = dict(varying=mat.varying | named, unreduced=unreduced)
        if hasattr(mat, "unreduced_kind"):  # jax >= 0.12: a kind only while unreduced
            changed["unreduced_kind"] = mat.unreduced_kind if unreduced else None
        kind = mat.update(**changed)
    return out.update(manual_axis_type=kind)


def _batcher(
    primitive,
    axis_data,
    vals_in,
    dims_in,
    *,
    axes,
    axis_index_groups,
    axis_size,
    invariant,
    reduced,
    op_id,
):
    if reduced:  # as jax.lax's reduced and unreduced collectives
        raise NotImplementedError(f"{API[primitive]} of reduced or unreduced values under vmap")
    params = dict(
        axes=axes, axis_index_groups=axis_index_groups, axis_size=axis_size, invariant=invariant
    )
    if axis_data.name not in axes:
        # The collective acts on dimension 0: each batch dimension goes after it.
        xs = [x if d is None else jnp.moveaxis(x, d, 1) for x, d in zip(vals_in, dims_in)]
        return bind(primitive, xs, **params), [None if d is None else 1 for d in dims_in]
    if axis_index_groups is not None or len(axes) > 1:
        raise NotImplementedError(
            f"{API[primitive]} over a vmapped axis: only that one axis, without "
            "axis_index_groups (as jax.lax)"
        )
    outs = [_over_vmapped_axis(primitive, axis_data.size, x, d) for x, d in zip(vals_in, dims_in)]
    return [o for o, _ in outs], [d for _, d in outs]


def _over_vmapped_axis(primitive, n: int, x, d):
    """One operand's collective over the vmapped axis itself: every "rank" is a slice of
    the batch dimension, a local operation on the stacked slices."""
    stacked = lax.broadcast(x, (n,)) if d is None else jnp.moveaxis(x, d, 0)  # (n, *x.shape)
    if primitive is accl_reduce_scatter_p:  # rank b: the sum over b' of block b of x_b'
        total = lax.reduce_sum(stacked, (0,))
        return total.reshape((n, total.shape[0] // n, *total.shape[1:])), 0
    gathered = stacked.reshape((n * stacked.shape[1], *stacked.shape[2:]))
    return gathered, None  # every rank's inputs, the same for all of them


def _jvp(
    primitive, primals, tangents, *, axes, axis_index_groups, axis_size, invariant, reduced, op_id
):
    params = dict(
        axes=axes,
        axis_index_groups=axis_index_groups,
        axis_size=axis_size,
        invariant=invariant,
        reduced=reduced,
    )
    outs = bind(primitive, list(primals), **params)
    zeros = [c.ad.Zero(c.core.typeof(o).to_tangent_aval()) for o in outs]
    return outs, c.move_nonzero(tangents, lambda ts: bind(primitive, ts, **params), zeros)


def _transpose(primitive, cts, *xs, axes, axis_index_groups, axis_size, invariant, reduced, op_id):
    zeros = [c.ad.Zero(c.ct_aval(x.aval)) for x in xs]
    if invariant:  # every device holds the whole cotangent: its own block, no data moves
        return c.move_nonzero(
            cts, lambda live: [_own_block(ct, axes, axis_size) for ct in live], zeros
        )
    other = accl_all_gather_p if primitive is accl_reduce_scatter_p else accl_reduce_scatter_p
    # A reduced all-gather's cotangents are unreduced: their reduce-scatter sums them.
    params = dict(
        axes=axes, axis_index_groups=axis_index_groups, axis_size=axis_size, reduced=reduced
    )
    return c.move_nonzero(cts, lambda live: bind(other, live, **params), zeros)


def _bind_low(primitive, xs, leading, *, reduced, **params):
    """`primitive` on JAX's low values of its operands (see c.def_high_operands): a
    reduce-scatter's vary along the axes where they were unreduced, its plain form; a
    leading unreduced dimension goes after the one the primitive acts on, and back."""
    if primitive is accl_reduce_scatter_p:
        reduced = False
    xs = [jnp.moveaxis(x, k, 0) for x, k in zip(xs, leading)]
    outs = primitive.bind(*xs, reduced=reduced, **params)
    return [jnp.moveaxis(o, 0, k) for o, k in zip(outs, leading)]


def _own_block(ct, axes, axis_size: int):
    block = ct.shape[0] // axis_size
    return lax.dynamic_slice_in_dim(ct, lax.axis_index(axes) * block, block, axis=0)


for _p in (accl_reduce_scatter_p, accl_all_gather_p):
    _p.def_impl(partial(c.dispatch.apply_primitive, _p))
    _p.def_effectful_abstract_eval(partial(_abstract_eval, _p))
    c.batching.fancy_primitive_batchers[_p] = partial(_batcher, _p)
    c.ad.primitive_jvps[_p] = partial(_jvp, _p)
    c.ad.primitive_transposes[_p] = partial(_transpose, _p)
    c.def_high_operands(_p, partial(_bind_low, _p))
