"""Lowering of ``accl_allreduce`` to the ``accl_allreduce`` FFI custom call.

Each call gets the replica groups of its axes (as jax.lax.psum computes them), the
device's partition index as an operand, and its attributes. Two contexts:

* fully manual (shard_map over every mesh axis, pmap): the custom call directly;
* partially manual (``shard_map(..., axis_names=...)`` a strict subset of the mesh axes):
  the SPMD partitioner refuses PartitionId there, and replicates an unknown custom call
  (gathering its operands along the automatic axes). So the call is lowered inside a
  nested region that is manual over the automatic axes too, each operand entering with
  the sharding its type records along them: each device all-reduces its own shard.

XLA's CPU runtime may run independent custom calls of one device concurrently and in
different orders on different devices; blocking collectives then starve each other. So
the calls of one block are chained: each takes the previous call's first result (the
partition index, passed through) as its partition-index operand. Loops and branches are
blocks of their own, run sequentially anyway. The chain's end per block lives in the
module's own cache (module-scoped, freed with the module).
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

from jax_accl import _accl, config, cost_model, distributed, log
from jax_accl import _compat as c
from jax_accl.names import ALGORITHM_CODES, API_NAMES, OP_CODES
from jax_accl.primitives.allreduce import accl_allreduce_p
from jax_accl.units import human

_U32 = c.core.ShapedArray((), np.uint32)

# The call inside the nested fully manual region: (partition index, *leaves) ->
# (partition index, *leaves), with accl_allreduce's parameters.
accl_allreduce_ordered_p = c.core.Primitive("accl_allreduce_ordered")
accl_allreduce_ordered_p.multiple_results = True
accl_allreduce_ordered_p.def_abstract_eval(lambda *avals, **params: list(avals))


def _padded_groups(groups) -> tuple[np.ndarray, int]:
    size = max(len(g) for g in groups)
    rows = [list(g) + [-1] * (size - len(g)) for g in groups]
    return np.asarray(rows, dtype=np.int64).reshape(-1), size


def _profile_name(algorithm: str, avals, groups) -> str:
    """The HLO name of the call, which is what profilers show: e.g. "accl_allreduce
    reduce_broadcast 16MiB" (for "auto" within one process, the cost model's pick for the
    whole call; across processes the pick depends on where they run and stays "auto")."""
    nbytes = sum(int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize for a in avals)
    if algorithm == "auto" and jax.process_count() == 1:
        algorithm = _accl.choose_algorithm(max(len(g) for g in groups), nbytes)
    return f"accl_allreduce {algorithm} {human(nbytes)}"


def _emit_call(ctx, order_in, xs, *, axes, axis_index_groups, op, algorithm, invariant, op_id):
    """The custom call itself, in a fully manual context; returns (order_out, results)."""
    del invariant  # a type-level property; the call is the same
    groups = c.replica_groups(ctx.module_context.axis_context, axes, axis_index_groups)
    flat_groups, group_size = _padded_groups(groups)
    cost_model.ensure_loaded()  # this machine's constants, if `bench --calibrate` stored them
    cfg = config.current()
    chosen = cfg.algorithm if algorithm == "auto" else algorithm
    devices = np.zeros((0,), np.int64)
    if jax.process_count() > 1:  # the native side needs every partition's global device
        distributed.ensure_started()
        devices = np.asarray([d.id for d in c.device_assignment(ctx)], np.int64)
    # In place: each result is its operand's buffer. XLA then allocates no output (at
    # 64 MiB per device, fresh buffers cost more in page faults than the all-reduce) and
    # copies an operand only where it is still needed afterwards.
    aliases = {k + 1: k + 1 for k in range(len(xs))}
    call = jax.ffi.ffi_lowering(
        "accl_allreduce", has_side_effect=True, operand_output_aliases=aliases
    )
    profile_name = _profile_name(chosen, ctx.avals_in, groups)
    log.once(
        (profile_name, len(groups), group_size),
        "jax_accl.%s over %s: %d group(s) of %d devices, %s -> %s",
        API_NAMES[op],
        axes,
        len(groups),
        group_size,
        profile_name.split()[-1],
        profile_name.split()[1],
    )
    with c.ir.Location.name(profile_name):
        order_out, *results = call(
            ctx.replace(avals_in=[_U32, *ctx.avals_in], avals_out=[_U32, *ctx.avals_out]),
            order_in,
            *xs,
            groups=flat_groups,
            group_size=np.int64(group_size),
            op=np.int64(OP_CODES[op]),
            algorithm=np.int64(ALGORITHM_CODES[chosen]),
            op_id=np.int64(op_id),
            timeout_ms=np.int64(cfg.timeout_s * 1000),
            name=f"jax_accl.{API_NAMES[op]} over {axes}",
            devices=devices,
        )
    return order_out, results


def _lowering(ctx, *xs, **params):
    module_cache = c.module_scratch(ctx)
    key = ("jax_accl_order", c.ir.InsertionPoint.current.block)
    order_in = module_cache.get(key)
    if not c.is_partial_manual(ctx):
        if order_in is None:  # the first call of this block: this device's index
            order_in = c.hlo.partition_id()
        order_out, results = _emit_call(ctx, order_in, xs, **params)
    else:
        if order_in is None:
            order_in = c.partition_index(ctx)
        specs = [c.spec_along_auto_axes(ctx, aval) for aval in ctx.avals_in]
        order_out, *results = c.lower_fully_manual(
            ctx.replace(avals_in=[_U32, *ctx.avals_in], avals_out=[_U32, *ctx.avals_out]),
            lambda order, *vals: tuple(accl_allreduce_ordered_p.bind(order, *vals, **params)),
            (P(), *specs),
            (P(), *specs),
            order_in,
            *xs,
        )
    module_cache[key] = order_out
    return results


def _ordered_lowering(ctx, order_in, *xs, **params):
    inner = ctx.replace(avals_in=ctx.avals_in[1:], avals_out=ctx.avals_out[1:])
    order_out, results = _emit_call(inner, order_in, xs, **params)
    return [order_out, *results]


c.mlir.register_lowering(accl_allreduce_p, _lowering, platform="cpu")
c.mlir.register_lowering(accl_allreduce_ordered_p, _ordered_lowering, platform="cpu")
