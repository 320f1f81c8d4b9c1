"""The ``accl_ppermute`` primitive: a collective permutation of one array, as
jax.lax.ppermute: ``perm`` holds (source, destination) pairs of indices along the axes
(taken modulo their size, as jax.lax does); a device that no pair sends to gets zeros.
Varying -> varying; linear, its transpose the inverse permutation; over a vmapped axis
a gather along the batch dimension. The lowering is jax_accl/primitives/lowering.py."""

from __future__ import annotations

from functools import partial

import numpy as np

from jax_accl import _compat as c
from jax_accl.primitives.allreduce import SUPPORTED_DTYPES, next_op_id

accl_ppermute_p = c.core.Primitive("accl_ppermute")


def bind(x, *, axes: tuple, perm: tuple):
    return accl_ppermute_p.bind(x, axes=axes, perm=perm, op_id=next_op_id())


def _abstract_eval(aval, *, axes, perm, op_id):
    c.check_axis_names(axes, "ppermute")
    dtype = np.dtype(aval.dtype)
    if dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"jax_accl.ppermute does not support dtype {dtype}")
    if c.check_vma_enabled() and not set(axes) <= c.varying_axes(aval):
        raise ValueError(
            f"jax_accl.ppermute must be applied to a value that varies along {axes}, but it "
            f"varies along {set(c.varying_axes(aval))}"
        )
    return aval, {c.core.NamedAxisEffect(axis) for axis in axes}


def _batcher(axis_data, vals_in, dims_in, *, axes, perm, op_id):
    (x,), (d,) = vals_in, dims_in
    if axis_data.name not in axes:
        return bind(x, axes=axes, perm=perm), d
    if len(axes) > 1:
        raise NotImplementedError(
            "jax_accl.ppermute over a vmapped axis and other axes at once (jax.lax drops the "
            "vmapped one, which is rarely what is meant)"
        )
    if len(perm) != axis_data.size:
        raise ValueError("jax_accl.ppermute over a vmapped axis: perm must cover the axis")
    if d is None:
        return x, None
    source = np.zeros(axis_data.size, dtype=int)
    for src, dst in perm:
        source[dst % axis_data.size] = src % axis_data.size
    return x.take(source, d), d


def _jvp(primals, tangents, *, axes, perm, op_id):
    (x,), (t,) = primals, tangents
    out = bind(x, axes=axes, perm=perm)
    if type(t) is c.ad.Zero:
        return out, c.ad.Zero(c.core.get_aval(out).to_tangent_aval())
    return out, bind(c.ad.instantiate_zeros(t), axes=axes, perm=perm)


def _transpose(ct, x, *, axes, perm, op_id):
    if type(ct) is c.ad.Zero:
        return [c.ad.Zero(c.ct_aval(x.aval))]
    inverse = tuple((dst, src) for src, dst in perm)
    return [bind(c.insert_collective_pvary(axes, ct), axes=axes, perm=inverse)]


accl_ppermute_p.def_impl(partial(c.dispatch.apply_primitive, accl_ppermute_p))
accl_ppermute_p.def_effectful_abstract_eval(_abstract_eval)
c.batching.fancy_primitive_batchers[accl_ppermute_p] = _batcher
c.ad.primitive_jvps[accl_ppermute_p] = _jvp
c.ad.primitive_transposes[accl_ppermute_p] = _transpose
