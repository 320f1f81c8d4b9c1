"""The ``accl_allreduce`` primitive: one leaf all-reduced by the native core.

Order (as mpi4jax): primitive, bind helper, abstract eval, batching, JVP, transpose,
lowering, registration. Semantics follow jax.lax.psum / pmax / pmin case by case:

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
from jax_accl import _accl
from jax_accl import config
from jax_accl import distributed
from jax_accl import log

accl_allreduce_p = c.core.Primitive("accl_allreduce")
accl_allreduce_p.multiple_results = True  # one call all-reduces a bucket of leaves

OP_CODES = {"sum": 0, "prod": 1, "min": 2, "max": 3}
ALGORITHM_CODES = {"auto": 0, "direct": 1, "ring": 2, "halving_doubling": 3,
                   "reduce_broadcast": 4, "hierarchical": 5}
API_NAMES = {"sum": "psum", "prod": "allreduce", "min": "pmin", "max": "pmax"}
SUPPORTED_DTYPES = frozenset(np.dtype(t) for t in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", jax.numpy.bfloat16, "float32", "float64", "complex64", "complex128"))

# Every bound call gets its own id (a primitive parameter, so that JAX never merges two
# calls into one lowering); with the launch's RunId and a per-device sequence number it
# keys the native rendezvous. Rules that bind new calls (vmap, JVP, transpose) take
# fresh ids.
_op_ids = itertools.count(1)


def fresh(params: dict) -> dict:
    return {**params, "op_id": next(_op_ids)}


def bind(xs, *, axes: tuple, axis_index_groups, op: str, algorithm: str) -> list:
    """All-reduce the arrays `xs` (one dtype) in one native call."""
    invariant = c.check_vma_enabled()
    if invariant and axis_index_groups is not None:
        raise NotImplementedError(
            f"jax_accl.{API_NAMES[op]}: axis_index_groups needs check_vma=False "
            "(as jax.lax.psum)")
    return accl_allreduce_p.bind(*xs, axes=axes, axis_index_groups=axis_index_groups, op=op,
                                 algorithm=algorithm, invariant=invariant,
                                 op_id=next(_op_ids))


def _abstract_eval(*avals, axes, axis_index_groups, op, algorithm, invariant, op_id):
    api = f"jax_accl.{API_NAMES[op]}"
    c.check_axis_names(axes, api)
    if len({np.dtype(a.dtype) for a in avals}) != 1:
        raise TypeError(f"{api}: one fused call takes one dtype, got "
                        f"{sorted({str(a.dtype) for a in avals})}")
    dtype = np.dtype(avals[0].dtype)
    if dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{api} does not support dtype {dtype}")
    if op in ("min", "max") and np.issubdtype(dtype, np.complexfloating):
        raise TypeError(f"{api}: {op} is not defined for complex dtype {dtype}")
    effects = {c.core.NamedAxisEffect(axis) for axis in axes}
    if not invariant:
        return list(avals), effects
    outs = []
    for aval in avals:
        varying = c.varying_axes(aval)
        if not set(axes) & varying:
            raise ValueError(
                f"{api} is a variant->invariant collective: the axes {axes} must be among "
                f"the varying axes of its input, {set(varying)}")
        outs.append(c.with_varying_axes(aval, frozenset(varying - set(axes))))
    return outs, effects


def _repeat_reduce(v, size: int, op: str):
    """The reduction of `size` copies of v (a value that is the same along the axis)."""
    if op == "sum":
        return lax.convert_element_type(size, v.dtype) * v if v.dtype != np.bool_ else v
    if op == "prod":
        return lax.integer_pow(v, size) if v.dtype != np.bool_ else v
    return v


_POSITIONAL = {"sum": lax.reduce_sum, "prod": lax.reduce_prod, "min": lax.reduce_min,
               "max": lax.reduce_max}


def positional_reduce(v, dims, op: str):
    if v.dtype == np.bool_ and op in ("sum", "max"):
        return lax.reduce_or(v, tuple(dims))
    if v.dtype == np.bool_:
        return lax.reduce_and(v, tuple(dims))
    return _POSITIONAL[op](v, tuple(dims))


def _batcher(axis_data, vals_in, dims_in, *, axes, axis_index_groups, op, algorithm,
             invariant, op_id):
    params = dict(axis_index_groups=axis_index_groups, op=op, algorithm=algorithm,
                  invariant=invariant, op_id=next(_op_ids))
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
    outs = [_repeat_reduce(v, axis_data.size, op) if d is None else v
            for v, d in zip(vals, dims_in)]
    return outs, [None] * len(outs)


def _jvp(primals, tangents, **params):
    if params["op"] != "sum":
        raise NotImplementedError(
            f"Differentiation rule for 'accl_allreduce' with op={params['op']!r} is not "
            f"implemented (jax.lax.{API_NAMES[params['op']]} has none either)")
    out = accl_allreduce_p.bind(*primals, **params)
    if all(type(t) is c.ad.Zero for t in tangents):
        return out, [c.ad.Zero(c.ct_aval(c.core.get_aval(v))) for v in out]
    tangents = [c.ad.instantiate_zeros(t) for t in tangents]
    return out, accl_allreduce_p.bind(*tangents, **fresh(params))


def _transpose(cts, *xs, axes, axis_index_groups, op, algorithm, invariant, op_id):
    live = [k for k, ct in enumerate(cts) if type(ct) is not c.ad.Zero]
    out = [c.ad.Zero(c.ct_aval(x.aval)) for x in xs]
    if invariant:  # psum_invariant: each cotangent is already replicated; no data moves
        for k in live:
            out[k] = c.pvary(cts[k], axes)
    elif live:  # psum = psum-then-broadcast, so the transpose sums again (as psum_p)
        summed = accl_allreduce_p.bind(*[cts[k] for k in live], axes=axes,
                                       axis_index_groups=axis_index_groups, op=op,
                                       algorithm=algorithm, invariant=False,
                                       op_id=next(_op_ids))
        for k, v in zip(live, summed):
            out[k] = v
    return out


def _padded_groups(groups) -> tuple[np.ndarray, int]:
    size = max(len(g) for g in groups)
    rows = [list(g) + [-1] * (size - len(g)) for g in groups]
    return np.asarray(rows, dtype=np.int64).reshape(-1), size


# XLA's CPU runtime may run independent custom calls of one device concurrently and in
# different orders on different devices; blocking collectives then starve each other.
# So the calls of one block are chained: each takes the previous call's first result
# (the partition id, passed through) as its partition-id operand. Loops and branches
# are blocks of their own, run sequentially anyway. The chain's end per block lives in
# the module's own cache (module-scoped, freed with the module).


def _profile_name(algorithm: str, avals, groups) -> str:
    """The HLO name of the call, which is what profilers show: e.g. "accl_allreduce
    reduce_broadcast 16MiB" (for "auto" within one process, the cost model's pick for the
    whole call; across processes the pick depends on where they run and stays "auto")."""
    nbytes = sum(int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize for a in avals)
    if algorithm == "auto" and jax.process_count() == 1:
        algorithm = _accl.choose_algorithm(max(len(g) for g in groups), nbytes)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("B", 1)):
        if nbytes >= scale or unit == "B":
            size = f"{nbytes / scale:.3g}{unit}"
            break
    return f"accl_allreduce {algorithm} {size}"


def _lowering(ctx, *xs, axes, axis_index_groups, op, algorithm, invariant, op_id):
    groups = c.replica_groups(ctx.module_context.axis_context, axes, axis_index_groups)
    flat_groups, group_size = _padded_groups(groups)
    cfg = config.current()
    chosen = cfg.algorithm if algorithm == "auto" else algorithm
    u32 = c.core.ShapedArray((), np.uint32)
    module_cache = c.module_scratch(ctx)
    key = ("jax_accl_order", c.ir.InsertionPoint.current.block)
    order_in = module_cache.get(key)
    if order_in is None:  # the first call of this block: this device's logical index
        order_in = c.hlo.partition_id()
    devices = np.zeros((0,), np.int64)
    if jax.process_count() > 1:  # the native side needs every partition's global device
        distributed.ensure_started()
        devices = np.asarray([d.id for d in c.device_assignment(ctx)], np.int64)
    # In place: each result is its operand's buffer. XLA then allocates no output (at
    # 64 MiB per device, fresh buffers cost more in page faults than the all-reduce) and
    # copies an operand only where it is still needed afterwards.
    aliases = {k + 1: k + 1 for k in range(len(xs))}
    call = jax.ffi.ffi_lowering("accl_allreduce", has_side_effect=True,
                                operand_output_aliases=aliases)
    profile_name = _profile_name(chosen, ctx.avals_in, groups)
    log.once((profile_name, len(groups), group_size), "jax_accl.%s over %s: %d group(s) of %d "
             "devices, %s -> %s", API_NAMES[op], axes, len(groups), group_size,
             profile_name.split()[-1], profile_name.split()[1])
    with c.ir.Location.name(profile_name):
      order_out, *results = call(
          ctx.replace(avals_in=[u32, *ctx.avals_in], avals_out=[u32, *ctx.avals_out]), order_in,
          *xs, groups=flat_groups, group_size=np.int64(group_size), op=np.int64(OP_CODES[op]),
          algorithm=np.int64(ALGORITHM_CODES[chosen]), op_id=np.int64(op_id),
          timeout_ms=np.int64(cfg.timeout_s * 1000), name=f"jax_accl.{API_NAMES[op]} over {axes}",
          devices=devices)
    module_cache[key] = order_out
    return results


accl_allreduce_p.def_impl(partial(c.dispatch.apply_primitive, accl_allreduce_p))
accl_allreduce_p.def_effectful_abstract_eval(_abstract_eval)
c.batching.fancy_primitive_batchers[accl_allreduce_p] = _batcher
c.ad.primitive_jvps[accl_allreduce_p] = _jvp
c.ad.primitive_transposes[accl_allreduce_p] = _transpose
c.mlir.register_lowering(accl_allreduce_p, _lowering, platform="cpu")
