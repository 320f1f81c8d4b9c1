"""The ``accl_allreduce`` primitive: a bucket of leaves of one dtype all-reduced by one
native call.

Order (as mpi4jax): primitive, bind helper, abstract eval, batching, JVP, transpose,
registration; the lowering is jax_accl/primitives/lowering.py. Semantics follow
jax.lax.psum / pmax / pmin case by case:

* under ``check_vma=True`` the result is invariant along the reduced axes (as
  ``psum_invariant``), and the transpose of a sum moves no data (``pvary``);
* under ``check_vma=False`` the type is unchanged and the transpose of a sum is a sum;
* a reduction over a vmapped axis is a local reduction over the batch dimension.
"""

from __future__ import annotations

import itertools
from functools import partial

import jax
import numpy as np
from jax import lax

from jax_accl import _compat as c
from jax_accl.names import API_NAMES

accl_allreduce_p = c.core.Primitive("accl_allreduce")
accl_allreduce_p.multiple_results = True  # one call all-reduces a bucket of leaves

SUPPORTED_DTYPES = frozenset(
    np.dtype(t)
    for t in (
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        jax.numpy.bfloat16,
        "float32",
        "float64",
        "complex64",
        "complex128",
    )
)

# Every bound call gets its own id (a primitive parameter, so that JAX never merges two
# calls into one lowering); with the launch's RunId and a per-device sequence number it
# keys the native rendezvous. Rules that bind new calls (vmap, JVP, transpose) take
# fresh ids.
_op_ids = itertools.count(1)


def next_op_id() -> int:
    return next(_op_ids)


def fresh(params: dict) -> dict:
    return {**params, "op_id": next_op_id()}


def check_varying_bucket(avals, axes: tuple, api: str) -> None:
    """A data collective's bucket (ppermute's, broadcast's, reduce's): one supported dtype,
    every array varying along `axes` under check_vma; `api` names it, e.g.
    "jax_accl.ppermute"."""
    if len({np.dtype(a.dtype) for a in avals}) > 1:
        raise TypeError(f"{api}: one call moves arrays of one dtype, got {avals}")
    for aval in avals:
        dtype = np.dtype(aval.dtype)
        if dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"{api} does not support dtype {dtype}")
        if c.check_vma_enabled() and not set(axes) <= c.varying_axes(aval):
            raise ValueError(
                f"{api} must be applied to a value that varies along {axes}, but it varies "
                f"along {set(c.varying_axes(aval))}"
            )


def bind(
    xs, *, axes: tuple, axis_index_groups, op: str, algorithm: str, invariant=None, wire=False
) -> list:
    """All-reduce the arrays `xs` (one dtype) in one native call; the result is invariant
    along `axes` (psum_invariant's type) under check_vma=True or with invariant=True.
    `wire`: float32 sums whose bytes travel as bfloat16 (jax_accl/wire_dtype.py)."""
    invariant = c.check_vma_enabled() if invariant is None else invariant
    if invariant and axis_index_groups is not None:
        raise NotImplementedError(
            f"jax_accl.{API_NAMES[op]}: axis_index_groups needs check_vma=False (as jax.lax.psum)"
        )
    return accl_allreduce_p.bind(
        *xs,
        axes=axes,
        axis_index_groups=axis_index_groups,
        op=op,
        algorithm=algorithm,
        invariant=invariant,
        op_id=next(_op_ids),
        wire=bool(wire),
    )


def _abstract_eval(*avals, axes, axis_index_groups, op, algorithm, invariant, op_id, wire):
    api = f"jax_accl.{API_NAMES[op]}"
    c.check_axis_names(axes, API_NAMES[op])  # the message jax.lax.psum & co give
    if len({np.dtype(a.dtype) for a in avals}) != 1:
        raise TypeError(
            f"{api}: one fused call takes one dtype, got {sorted({str(a.dtype) for a in avals})}"
        )
    dtype = np.dtype(avals[0].dtype)
    if dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{api} does not support dtype {dtype}")
    if op in ("min", "max") and np.issubdtype(dtype, np.complexfloating):
        raise TypeError(f"{api}: {op} is not defined for complex dtype {dtype}")
    if wire and (op != "sum" or dtype != np.float32):
        raise TypeError(f"{api}: bfloat16 on the wire is for float32 sums, got {op} of {dtype}")
    effects = {c.core.NamedAxisEffect(axis) for axis in axes}
    if not invariant:
        return list(avals), effects
    outs = []
    for aval in avals:
        varying = c.varying_axes(aval)
        if not set(axes) & varying:
            raise ValueError(
                f"{api} is a variant->invariant collective: the axes {axes} must be among "
                f"the varying axes of its input, {set(varying)}"
            )
        outs.append(c.with_varying_axes(aval, frozenset(varying - set(axes))))
    return outs, effects


def repeat_reduce(v, size: int, op: str):
    """The reduction of `size` copies of v (a value that is the same along the axis)."""
    if op == "sum":
        return lax.convert_element_type(size, v.dtype) * v if v.dtype != np.bool_ else v
    if op == "prod":
        return lax.integer_pow(v, size) if v.dtype != np.bool_ else v
    return v


_POSITIONAL = {
    "sum": lax.reduce_sum,
    "prod": lax.reduce_prod,
    "min": lax.reduce_min,
    "max": lax.reduce_max,
}


def positional_reduce(v, dims, op: str):
    if v.dtype == np.bool_ and op in ("sum", "max"):
        return lax.reduce_or(v, tuple(dims))
    if v.dtype == np.bool_:
        return lax.reduce_and(v, tuple(dims))
    return _POSITIONAL[op](v, tuple(dims))


def _batcher(
    axis_data, vals_in, dims_in, *, axes, axis_index_groups, op, algorithm, invariant, op_id, wire
):
    params = dict(
        axis_index_groups=axis_index_groups,
        op=op,
        algorithm=algorithm,
        invariant=invariant,
        op_id=next(_op_ids),
        wire=wire,
    )
    if axis_data.name not in axes:
        return accl_allreduce_p.bind(*vals_in, axes=axes, **params), list(dims_in)
    if axis_index_groups is not None:
        raise NotImplementedError("axis_index_groups not supported in vmap collectives")
    rest = tuple(a for a in axes if a != axis_data.name)
    # Batched operands: reduce the batch dimension locally, then the remaining axes.
    # Unbatched ones are the same along the vmapped axis: reduce the remaining axes,
    # then fold the copies (the order jax.lax.psum uses).
    vals = [v if d is None else positional_reduce(v, [d], op) for v, d in zip(vals_in, dims_in)]
    if rest:
        vals = accl_allreduce_p.bind(*vals, axes=rest, **params)
    outs = [repeat_reduce(v, axis_data.size, op) if d is None else v for v, d in zip(vals, dims_in)]
    return outs, [None] * len(outs)


def _jvp(primals, tangents, **params):
    if params["op"] != "sum":
        raise NotImplementedError(
            f"Differentiation rule for 'accl_allreduce' with op={params['op']!r} is not "
            f"implemented (jax.lax.{API_NAMES[params['op']]} has none either)"
        )
    out = accl_allreduce_p.bind(*primals, **params)
    if all(type(t) is c.ad.Zero for t in tangents):
        return out, [c.ad.Zero(c.ct_aval(c.core.get_aval(v))) for v in out]
    tangents = [c.ad.instantiate_zeros(t) for t in tangents]
    return out, accl_allreduce_p.bind(*tangents, **fresh(params))


def _transpose(cts, *xs, axes, axis_index_groups, op, algorithm, invariant, op_id, wire):
    live = [k for k, ct in enumerate(cts) if type(ct) is not c.ad.Zero]
    out = [c.ad.Zero(c.ct_aval(x.aval)) for x in xs]
    if invariant:  # psum_invariant: each cotangent is already replicated; no data moves
        for k in live:
            out[k] = c.pvary(cts[k], axes)
    elif live:  # psum = psum-then-broadcast, so the transpose sums again (as psum_p)
        summed = bind(
            [cts[k] for k in live],
            axes=axes,
            axis_index_groups=axis_index_groups,
            op=op,
            algorithm=algorithm,
            invariant=False,
            wire=wire,
        )
        for k, v in zip(live, summed):
            out[k] = v
    return out


accl_allreduce_p.def_impl(partial(c.dispatch.apply_primitive, accl_allreduce_p))
accl_allreduce_p.def_effectful_abstract_eval(_abstract_eval)
c.batching.fancy_primitive_batchers[accl_allreduce_p] = _batcher
c.ad.primitive_jvps[accl_allreduce_p] = _jvp
c.ad.primitive_transposes[accl_allreduce_p] = _transpose
# A value unreduced along other axes (high from jax 0.12.1) is all-reduced as its low
# value, each device's partial sum, as JAX's psum, pmax and pmin do.
c.def_high_operands(
    accl_allreduce_p, lambda xs, leading, **params: accl_allreduce_p.bind(*xs, **params)
)
