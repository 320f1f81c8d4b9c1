"""Lowering of jax_accl's primitives (all-reduce, reduce-scatter, all-gather, ppermute,
all-to-all, ragged all-to-all, broadcast, reduce) to their FFI custom calls
(``accl_allreduce``, ``accl_reduce_scatter``, ...).

Each call gets the replica groups of its axes (as jax.lax.psum computes them), the
global device id of every partition (the handler finds its own partition from the FFI
context's device ordinal), a lane and its attributes; its name (what profilers show) is
the schedule of the runtime's own plan for it (jax_accl.plan.runtime). Its operands and
results are the data alone, every result aliasing its operand (an all-reduce's,
broadcast's or reduce's, but where the operand is an argument of the program XLA must
keep: operand_origin.py): XLA:CPU orders thunks by
the buffers they touch, so a call XLA can overlap with the compute around it has no
other operand or result (a 4-byte partition id or token would share a slice with later
compute and make that compute wait for the call). Calls are matched natively by (group,
lane, sequence): the lane names the call within its module (its place in the lowering
order and its groups, the same in every process), so calls that XLA runs in different
orders on different devices never pair up wrongly, and several calls of one device can
be in flight at once.

Two contexts:

* fully manual (shard_map over every mesh axis, pmap): the custom call directly;
* partially manual (``shard_map(..., axis_names=...)`` a strict subset of the mesh axes):
  the SPMD partitioner replicates an unknown custom call (gathering its operands along
  the automatic axes). So the call is lowered inside a nested region that is manual over
  the automatic axes too, each operand entering with the sharding its type records along
  them: each device all-reduces (reduce-scatters, gathers, permutes) its own shard.
"""

from __future__ import annotations

from functools import partial

import jax
import numpy as np

from jax_accl import _accl, config, cost_model, distributed, log
from jax_accl import _compat as c
from jax_accl.names import ALGORITHM_CODES, API_NAMES, COLLECTIVE_CODES, OP_CODES
from jax_accl.plan.runtime import runtime_plan
from jax_accl.primitives import lanes
from jax_accl.primitives.all_to_all import accl_all_to_all_p
from jax_accl.primitives.allreduce import accl_allreduce_p
from jax_accl.primitives.permute import accl_ppermute_p
from jax_accl.primitives.ragged_all_to_all import (
    accl_ragged_all_to_all_p,
    accl_ragged_call_p,
    layout_table,
)
from jax_accl.primitives.scatter_gather import API as SCATTER_GATHER_API
from jax_accl.units import human

# The call inside the nested fully manual region, with accl_allreduce's parameters.
accl_allreduce_manual_p = c.core.Primitive("accl_allreduce_manual")
accl_allreduce_manual_p.multiple_results = True
accl_allreduce_manual_p.def_abstract_eval(lambda *avals, **params: list(avals))


def _padded_groups(groups) -> tuple[np.ndarray, int]:
    size = max(len(g) for g in groups)
    rows = [list(g) + [-1] * (size - len(g)) for g in groups]
    return np.asarray(rows, dtype=np.int64).reshape(-1), size


def _places(group, devices) -> tuple[list[tuple[str, int]], int]:
    """Where each member of `group` (partition ids) lives, (host, process), and this
    process's rails: in one process, all in it; across processes, as the process table
    jax_accl's bootstrap published says (the runtime's communicator reads the same)."""
    if jax.process_count() == 1:
        return [("local", 0)] * len(group), 1
    table = distributed.topology()
    where = {d: (e["host"], i) for i, e in enumerate(table) for d in e["devices"]}
    return [where[devices[p]] for p in group], max(1, len(table[jax.process_index()]["rails"]))


def _allreduce_schedule(algorithm: str, avals, groups, devices, wire: bool = False) -> str:
    """The schedule of the runtime's own plan for an all-reduce (jax_accl.plan.runtime,
    for its largest group), which its profile and log name: e.g. reduce_broadcast; with
    `wire` (float32 as bfloat16) the plan of the half as many bytes the call carries."""
    nbytes = sum(_nbytes(a) for a in avals) // (2 if wire else 1)
    places, rails = _places(max(groups, key=len), devices)
    plan = runtime_plan(
        places, nbytes, algorithm=algorithm, rails=rails, one_shot=jax.process_count() == 1
    )
    return plan.schedule


def _lane(ctx, groups) -> int:
    """The call's lane (lanes.next_lane): its index among its module's jax_accl calls in
    lowering order and its groups, hashed. Not its shapes: processes that call different
    shapes meet in one lane, where the call's signature tells them apart. Not the module:
    programs share lanes (and their channels), so a process has as many as its largest
    program has calls, and a lane's calls of one device run in turn. No two calls of a
    program share one (lanes.py: a helper used twice is lowered twice, a
    custom_partitioning rule's calls hash its site)."""
    return lanes.next_lane(c.module_scratch(ctx), groups)


def device_ids(ctx, groups) -> tuple:
    """The global device id of every partition. In one process, where the module names
    no devices (an abstract mesh), the process's devices in order, as XLA assigns them."""
    try:
        return tuple(d.id for d in c.device_assignment(ctx))
    except NotImplementedError:
        if jax.process_count() > 1:
            raise
        partitions = 1 + max(max(g) for g in groups)
        return tuple(d.id for d in jax.local_devices()[:partitions])


def _emit_call(
    ctx, xs, *, axes, axis_index_groups, op, algorithm, invariant, op_id, wire, lane, devices
):
    """The all-reduce's custom call, in a fully manual context: in place (each result is
    its operand's buffer: XLA then allocates no output, and at 64 MiB per device fresh
    buffers cost more in page faults than the all-reduce; it copies an operand only where
    it is still needed afterwards) but where the operand is an argument of the program
    XLA must keep (operand_origin drops those aliases once the module is lowered), named
    by the runtime's plan for it; `wire`: float32 travelling as bfloat16 (its handler's
    messages bfloat16, its buffers float32)."""
    del invariant  # a type-level property; the call is the same
    groups = c.replica_groups(ctx.module_context.axis_context, axes, axis_index_groups)
    cost_model.ensure_loaded()  # this machine's constants, if `bench --calibrate` stored them
    chosen = config.current().algorithm if algorithm == "auto" else algorithm
    if jax.process_count() > 1:  # the process table first: the plan reads it
        distributed.ensure_started()
    return emit_data_call(
        ctx,
        xs,
        "accl_allreduce_bf16_wire" if wire else "accl_allreduce",
        f"jax_accl.{API_NAMES[op]}",
        axes,
        groups,
        devices,
        op_id,
        _allreduce_schedule(chosen, ctx.avals_in, groups, devices, wire),
        aliases={k: k for k in range(len(xs))},
        forced=chosen,
        op=op,
        lane=lane,
    )


def _attributes(target, groups, op, algorithm, op_id, lane, name, devices, args):
    """The attributes every jax_accl target takes (xla_ffi/ffi/collective_ffi.cc): which
    collective it is, its group, op and schedule, and `args`, the collective's arguments
    (a permutation's destination of each partition, a rooted collective's root)."""
    flat_groups, group_size = _padded_groups(groups)
    return dict(
        collective=np.int64(COLLECTIVE_CODES[target]),
        args=np.asarray(args, np.int64).reshape(-1),
        groups=flat_groups,
        group_size=np.int64(group_size),
        op=np.int64(OP_CODES[op]),
        algorithm=np.int64(ALGORITHM_CODES[algorithm]),
        op_id=np.int64(op_id),
        lane=np.int64(lane),
        timeout_ms=np.int64(config.current().timeout_s * 1000),
        pipeline_chunks=np.int64(config.value("JAX_ACCL_PIPELINE_CHUNKS")),
        name=name,
        devices=np.asarray(devices, np.int64),
        processes=np.int64(jax.process_count()),
    )


def _scatter_gather_lowering(
    ctx, *xs, primitive, axes, axis_index_groups, axis_size, invariant, reduced, op_id
):
    """accl_reduce_scatter / accl_all_gather: one result per operand (of another size,
    so no aliasing); the schedule is the runtime's plan for the bucket (direct, ring or by
    host)."""
    api = SCATTER_GATHER_API[primitive]
    params = dict(axes=axes, axis_index_groups=axis_index_groups, axis_size=axis_size)
    params.update(invariant=invariant, reduced=reduced, op_id=op_id)
    if c.is_partial_manual(ctx):  # first: before the bootstrap that _places may start
        return lower_per_shard(ctx, xs, api, lambda *v: primitive.bind(*v, **params), dim0=True)
    groups = c.replica_groups(ctx.module_context.axis_context, axes, axis_index_groups)
    devices = device_ids(ctx, groups)
    algorithm = _schedule_name(ctx, groups, devices, primitive.name.removeprefix("accl_"))
    return emit_data_call(ctx, xs, primitive.name, api, axes, groups, devices, op_id, algorithm)


def _schedule_name(ctx, groups, devices, collective: str, forced: str = "auto") -> str:
    """The runtime's own plan_call of a data call (direct, ring or by_host), as the
    profile and the log name it."""
    places, _ = _places(max(groups, key=len), devices)
    nbytes = sum(_nbytes(aval) for aval in ctx.avals_in)
    schedule = _accl.plan(places, nbytes, algorithm=forced, collective=collective)["schedule"]
    return "by_host" if schedule == "hierarchical" else schedule


def _ppermute_lowering(ctx, *xs, axes, perm, op_id):
    """accl_ppermute: the partition each partition sends to, from `perm` as jax.lax
    reads it (indices into each group in ascending order, modulo its size)."""
    if c.is_partial_manual(ctx):
        return lower_per_shard(
            ctx,
            xs,
            "jax_accl.ppermute",
            lambda *v: accl_ppermute_p.bind(*v, axes=axes, perm=perm, op_id=op_id),
        )
    groups = c.replica_groups(ctx.module_context.axis_context, axes, None)
    devices = device_ids(ctx, groups)
    send_to = np.full(len(devices), -1, np.int64)
    for group in groups:
        ordered, n = sorted(group), len(group)
        pairs = [(src % n, dst % n) for src, dst in perm]
        if len({s for s, _ in pairs}) != len(pairs) or len({d for _, d in pairs}) != len(pairs):
            raise ValueError(
                f"jax_accl.ppermute: sources and destinations must be unique, got {perm}"
            )
        for src, dst in pairs:
            send_to[ordered[src]] = ordered[dst]
    return emit_data_call(
        ctx,
        xs,
        "accl_ppermute",
        "jax_accl.ppermute",
        axes,
        groups,
        devices,
        op_id,
        "direct",
        args=send_to,
    )


def _all_to_all_lowering(ctx, *xs, axes, axis_index_groups, axis_size, op_id):
    """accl_all_to_all: each rank's n blocks to the n ranks of its group, direct or by host
    as the runtime's plan chooses (JAX_ACCL_ALGORITHM=direct or hierarchical forces it)."""
    params = dict(axes=axes, axis_index_groups=axis_index_groups, axis_size=axis_size)
    if c.is_partial_manual(ctx):
        return lower_per_shard(
            ctx,
            xs,
            "jax_accl.all_to_all",
            lambda *v: accl_all_to_all_p.bind(*v, **params, op_id=op_id),
            dim0=True,
        )
    groups = c.replica_groups(ctx.module_context.axis_context, axes, axis_index_groups)
    devices = device_ids(ctx, groups)
    chosen = config.value("JAX_ACCL_ALGORITHM")
    forced = chosen if chosen in ("direct", "hierarchical") else "auto"
    return emit_data_call(
        ctx,
        xs,
        "accl_all_to_all",
        "jax_accl.all_to_all",
        axes,
        groups,
        devices,
        op_id,
        _schedule_name(ctx, groups, devices, "all_to_all", forced),
        forced=forced,
    )


def _ragged_lowering(
    ctx, operand, output, *sizes, axes, axis_index_groups, axis_size, instances, op_id
):
    """accl_ragged_all_to_all: the layout table built from the offsets and sizes, then
    the native call on (operand, output, table), its result the output's buffer."""
    params = dict(axes=axes, axis_index_groups=axis_index_groups, axis_size=axis_size)
    if c.is_partial_manual(ctx):
        return lower_per_shard(
            ctx,
            (operand, output, *sizes),
            "jax_accl.ragged_all_to_all",
            lambda *v: [
                accl_ragged_all_to_all_p.bind(*v, **params, instances=instances, op_id=op_id)
            ],
            dim0=True,
            results=(1,),  # the output's
        )

    def call(operand, output, *sizes):
        table = layout_table(operand.shape, output.shape, sizes, instances)
        return [accl_ragged_call_p.bind(operand, output, table, **params, op_id=op_id)]

    return c.mlir.lower_fun(call, multiple_results=True)(ctx, operand, output, *sizes)


def _ragged_call_lowering(
    ctx, operand, output, table, *, axes, axis_index_groups, axis_size, op_id
):
    groups = c.replica_groups(ctx.module_context.axis_context, axes, axis_index_groups)
    devices = device_ids(ctx, groups)
    return emit_data_call(
        ctx,
        (operand, output, table),
        "accl_ragged_all_to_all",
        "jax_accl.ragged_all_to_all",
        axes,
        groups,
        devices,
        op_id,
        "direct",
        aliases={1: 0},
    )


def lower_per_shard(ctx, xs, api: str, bind, dim0: bool = False, results=None):
    """Inside a partially manual shard_map: `bind` (the collective over the manual axes)
    lowered in a region manual over the automatic axes too, on each device's own shard
    of every operand (sharded along them as its type says), so the partitioner never
    gathers it. A reduce-scatter or all-gather splits or stacks dimension 0 (`dim0`),
    which must then not be sharded along an automatic axis. `results`: the operands
    whose specs the results have (default: one result per operand)."""
    specs = tuple(c.spec_along_auto_axes(ctx, aval) for aval in ctx.avals_in)
    for spec in specs:
        if dim0 and len(spec) and spec[0] is not None:
            raise NotImplementedError(
                f"{api} inside a shard_map that is manual over only some mesh axes: the "
                f"dimension it scatters or gathers is sharded along the automatic axes "
                f"{spec[0]!r}; use jax.lax's, or shard another dimension"
            )
    out_specs = specs if results is None else tuple(specs[k] for k in results)
    return c.lower_fully_manual(ctx, lambda *v: tuple(bind(*v)), specs, out_specs, *xs)


def _nbytes(aval) -> int:
    return int(np.prod(aval.shape)) * np.dtype(aval.dtype).itemsize


def emit_data_call(
    ctx,
    xs,
    target,
    api,
    axes,
    groups,
    devices,
    op_id,
    algorithm,
    aliases=None,
    forced="auto",
    op="sum",
    lane=None,
    args=(),
):
    """Every jax_accl custom call (fully manual contexts only): one result per operand,
    or as `aliases` ({operand: result}) says; `algorithm` names its schedule in the
    profile (the HLO name profilers show, e.g. "accl_allreduce reduce_broadcast 16MiB")
    and the log, `forced` is the algorithm the runtime's plan is asked for, `lane` the
    call's (default: the next of the module, _lane), `args` the collective's arguments
    (_attributes). A new collective's primitive module lowers through it and registers
    its lowering there (primitives/rooted.py)."""
    if jax.process_count() > 1:
        distributed.ensure_started()
    nbytes = sum(_nbytes(aval) for aval in ctx.avals_in)
    profile_name = f"{target} {algorithm} {human(nbytes)}"
    log.once(
        (profile_name, len(groups)),
        "%s over %s: %d group(s) of %d devices, %d array(s), %s -> %s",
        api,
        axes,
        len(groups),
        max(len(g) for g in groups),
        len(xs),
        human(nbytes),
        algorithm,
    )
    call = jax.ffi.ffi_lowering(target, has_side_effect=True, operand_output_aliases=aliases)
    lane = _lane(ctx, groups) if lane is None else lane
    name = f"{api} over {axes}"
    attributes = _attributes(target, groups, op, forced, op_id, lane, name, devices, args)
    with c.ir.Location.name(profile_name):
        return call(ctx, *xs, **attributes)


def _lowering(ctx, *xs, **params):
    groups = c.replica_groups(
        ctx.module_context.axis_context, params["axes"], params["axis_index_groups"]
    )
    # The global device id of every partition: the handler finds its partition (and so
    # its group and rank) from the device ordinal XLA gives it.
    call = {"lane": _lane(ctx, groups), "devices": device_ids(ctx, groups)}
    if not c.is_partial_manual(ctx):
        return _emit_call(ctx, xs, **params, **call)
    specs = [c.spec_along_auto_axes(ctx, aval) for aval in ctx.avals_in]
    return c.lower_fully_manual(
        ctx,
        lambda *vals: tuple(accl_allreduce_manual_p.bind(*vals, **params, **call)),
        tuple(specs),
        tuple(specs),
        *xs,
    )


def _manual_lowering(ctx, *xs, **params):
    return _emit_call(ctx, xs, **params)


lanes.install()
# Not cacheable: JAX would lower identical equations (an unrolled scan's, a remat's) to
# one shared function, and their calls would share a lane.
c.mlir.register_lowering(accl_allreduce_p, _lowering, platform="cpu", cacheable=False)
c.mlir.register_lowering(accl_allreduce_manual_p, _manual_lowering, platform="cpu")
for _p in SCATTER_GATHER_API:
    c.mlir.register_lowering(
        _p, partial(_scatter_gather_lowering, primitive=_p), platform="cpu", cacheable=False
    )
c.mlir.register_lowering(accl_ppermute_p, _ppermute_lowering, platform="cpu", cacheable=False)
c.mlir.register_lowering(accl_all_to_all_p, _all_to_all_lowering, platform="cpu", cacheable=False)
c.mlir.register_lowering(
    accl_ragged_all_to_all_p, _ragged_lowering, platform="cpu", cacheable=False
)
c.mlir.register_lowering(accl_ragged_call_p, _ragged_call_lowering, platform="cpu", cacheable=False)
