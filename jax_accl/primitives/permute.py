"""The ``accl_ppermute`` primitive: a collective permutation of a bucket of arrays (one
dtype) in one native call, as jax.lax.ppermute: ``perm`` holds (source, destination)
pairs of indices along the axes (taken modulo their size, as jax.lax does); a device
that no pair sends to gets zeros. Varying -> varying; linear, its transpose the inverse
permutation; over a vmapped axis a gather along the batch dimension. The lowering is
jax_accl/primitives/lowering.py."""

from __future__ import annotations

from functools import partial

import numpy as np

from jax_accl import _compat as c
from jax_accl.primitives.allreduce import check_varying_bucket, next_op_id

accl_ppermute_p = c.core.Primitive("accl_ppermute")
accl_ppermute_p.multiple_results = True  # one call moves a bucket of leaves


def bind(xs, *, axes: tuple, perm: tuple) -> list:
    if not xs:
        return []
    return accl_ppermute_p.bind(*xs, axes=axes, perm=perm, op_id=next_op_id())


def _abstract_eval(*avals, axes, perm, op_id):
    c.check_axis_names(axes, "ppermute")
    check_varying_bucket(avals, axes, "jax_accl.ppermute")
    return list(avals), {c.core.NamedAxisEffect(axis) for axis in axes}


def _batcher(axis_data, vals_in, dims_in, *, axes, perm, op_id):
    if axis_data.name not in axes:
        return bind(list(vals_in), axes=axes, perm=perm), list(dims_in)
    if len(axes) > 1:
        raise NotImplementedError(
            "jax_accl.ppermute over a vmapped axis and other axes at once (jax.lax drops the "
            "vmapped one, which is rarely what is meant)"
        )
    if len(perm) != axis_data.size:
        raise ValueError("jax_accl.ppermute over a vmapped axis: perm must cover the axis")
    source = np.zeros(axis_data.size, dtype=int)
    for src, dst in perm:
        source[dst % axis_data.size] = src % axis_data.size
    outs = [x if d is None else x.take(source, d) for x, d in zip(vals_in, dims_in)]
    return outs, list(dims_in)


def _jvp(primals, tangents, *, axes, perm, op_id):
    outs = bind(list(primals), axes=axes, perm=perm)
    zeros = [c.ad.Zero(c.core.typeof(o).to_tangent_aval()) for o in outs]
    return outs, c.move_nonzero(tangents, lambda ts: bind(ts, axes=axes, perm=perm), zeros)


def _transpose(cts, *xs, axes, perm, op_id):
    inverse = tuple((dst, src) for src, dst in perm)

    def move(live):
        return bind([c.insert_collective_pvary(axes, ct) for ct in live], axes=axes, perm=inverse)

    return c.move_nonzero(cts, move, [c.ad.Zero(c.ct_aval(x.aval)) for x in xs])


accl_ppermute_p.def_impl(partial(c.dispatch.apply_primitive, accl_ppermute_p))
accl_ppermute_p.def_effectful_abstract_eval(_abstract_eval)
c.batching.fancy_primitive_batchers[accl_ppermute_p] = _batcher
c.ad.primitive_jvps[accl_ppermute_p] = _jvp
c.ad.primitive_transposes[accl_ppermute_p] = _transpose
