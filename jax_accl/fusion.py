"""Fusion of a shard_map body's jax_accl collectives into one native call per bucket.

Autodiff transposes each use of a replicated parameter separately, so a training step's
gradient all-reduce arrives as one ``accl_allreduce`` per parameter; a sharded step
(FSDP) gathers each parameter with an all-gather of its own and reduce-scatters each
gradient with its own. Before the body is lowered, calls of one collective that share
their axes, groups and type (and op and algorithm, for an all-reduce) are merged, as
XLA's combiners merge its own, into buckets of one dtype and at most
``JAX_ACCL_FUSION_BYTES`` (the same buckets as a fused ``jax_accl.psum`` of a pytree).

Schedule: the body's equations are walked in order. A call is held back in the group of
its key, and so is every effect-free equation that reads the results of one group only
(it waits with them); every other equation is emitted in place. A group is emitted (its
calls merged, then the equations that waited) as soon as its calls hold a bucket's worth
of bytes (gradient buckets, as PyTorch DDP's: autodiff emits the gradients in reverse
layer order, so the last layers' bucket is reduced while the earlier layers' backward
pass still computes; the first bucket of a key is small, so that communication starts
early; sizes from the cost model, see bucket_bytes()); or just before the first equation
that reads its results and cannot wait: a call that reads them, an equation reading two
groups or with effects; and at the end of the body. So no equation moves before its operands;
every device (and every process) rewrites its identical program identically, so all
still issue the same calls in the same order. Bodies of nested ``jit`` calls are fused
the same way.
"""

from __future__ import annotations

import jax

from jax_accl import _accl, config, cost_model
from jax_accl import _compat as c
from jax_accl.primitives.allreduce import accl_allreduce_p, fresh
from jax_accl.primitives.scatter_gather import accl_all_gather_p, accl_reduce_scatter_p
from jax_accl.reduction import fusion_buckets

# The collectives fused, and the parameters calls must share to be merged.
_KEYS = {
    accl_allreduce_p: ("axes", "axis_index_groups", "op", "algorithm", "invariant", "wire"),
    accl_reduce_scatter_p: ("axes", "axis_index_groups", "axis_size", "invariant", "reduced"),
    accl_all_gather_p: ("axes", "axis_index_groups", "axis_size", "invariant", "reduced"),
}


def fuse_jaxpr(jaxpr):
    """The jaxpr with its compatible accl_allreduce equations merged (the same object
    when there is nothing to merge)."""
    limit = config.current().fusion_bytes
    first_bucket, bucket = bucket_bytes(limit)
    flushed: dict = {}  # key -> buckets of that key emitted so far
    eqns: list = []
    groups: dict = {}  # key -> _Group, in the order the groups opened
    owner: dict = {}  # var defined by a held-back equation -> its group's key

    def target(key):  # the size at which the key's next bucket is full
        return bucket if flushed.get(key) else first_bucket

    def release(key):
        group = groups.pop(key)
        flushed[key] = flushed.get(key, 0) + 1
        for v in group.defined:
            owner.pop(v, None)
        eqns.extend(_merge(group.calls, limit))
        eqns.extend(group.after)

    for eqn in jaxpr.eqns:
        eqn = _fuse_nested(eqn)
        hit = list(dict.fromkeys(owner[v] for v in eqn.invars if _is_var(v) and v in owner))
        if eqn.primitive in _KEYS:
            for key in hit:  # it reads results held back: those go first
                release(key)
            key = (eqn.primitive.name,)
            key += tuple(_hashable(eqn.params[k]) for k in _KEYS[eqn.primitive])
            nbytes = sum(_nbytes(v.aval) for v in _sized(eqn.primitive, eqn.invars, eqn.outvars))
            if key in groups and groups[key].nbytes + nbytes > target(key):
                release(key)  # a full bucket: reduce it now, while earlier layers compute
            group = groups.setdefault(key, _Group())
            group.hold(eqn, eqn.outvars, owner, key, call=True)
            group.nbytes += nbytes
            if group.nbytes >= target(key):
                release(key)
        elif len(hit) == 1 and _movable(eqn):  # depends on one group only: wait with it
            groups[hit[0]].hold(eqn, eqn.outvars, owner, hit[0], call=False)
        else:
            for key in hit:
                release(key)
            eqns.append(eqn)
    for key in list(groups):
        release(key)
    if len(eqns) == len(jaxpr.eqns) and all(a is b for a, b in zip(eqns, jaxpr.eqns)):
        return jaxpr
    return jaxpr.replace(eqns=eqns)


class _Group:
    """Held-back calls of one key, and the equations that wait for their results."""

    def __init__(self):
        self.calls, self.after, self.defined = [], [], []
        self.nbytes = 0

    def hold(self, eqn, outvars, owner, key, *, call: bool):
        (self.calls if call else self.after).append(eqn)
        self.defined.extend(outvars)
        owner.update((v, key) for v in outvars)


def bucket_bytes(limit: int) -> tuple[int, int]:
    """(first, later) bucket sizes of a step's gradient reduction, at most `limit` each.
    A call costs about alpha plus bytes times beta (the cost model's constants: between
    hosts when the program spans processes, else among the device threads of one
    process; every process must see the same, as for the algorithm choice). Later
    buckets are large enough that alpha is at most 5% of a bucket's time (20 alpha /
    beta, at least 1 MiB); the first is a quarter of that, so that the first
    reduction starts early in the backward pass, as DDP's 1 MiB first bucket."""
    cost_model.ensure_loaded()  # as the calls' algorithm choice
    if jax.process_count() > 1:
        from jax_accl import distributed

        distributed.ensure_started()  # the job's wire, process 0's (jax_accl.distributed)
        model = _accl.get_cost_model()
        alpha, beta = model["net_alpha"], model["net_beta"]
    else:
        model = _accl.get_cost_model()
        alpha, beta = model["alpha"], model["beta"]
    later = max(1 << 20, int(20 * alpha / beta))
    return min(limit, max(256 << 10, later // 4)), min(limit, later)


def _sized(primitive, invars, outvars):
    """What a bucket's size counts: an all-gather's results (n times its operands, what
    each device receives), every other call's operands."""
    return outvars if primitive is accl_all_gather_p else invars


def _nbytes(aval) -> int:
    return int(aval.size) * aval.dtype.itemsize


def _movable(eqn) -> bool:
    """An equation may wait for a group if it has no effect other than naming axes."""
    return all(isinstance(e, c.core.NamedAxisEffect) for e in eqn.effects)


def _merge(members, limit: int) -> list:
    """Equations of one key merged into dtype buckets of at most `limit` bytes (the
    first bucket keeps the first call's id; each further one is a call of its own)."""
    if len(members) == 1:
        return members
    operands = [(v, out) for eqn in members for v, out in zip(eqn.invars, eqn.outvars)]
    first = members[0]
    effects = set().union(*(eqn.effects for eqn in members))
    merged = []
    sized = [_sized(first.primitive, [v], [out])[0].aval for v, out in operands]
    for bucket in fusion_buckets(list(enumerate(sized)), limit):
        pairs = [operands[k] for k, _ in bucket]
        params = dict(first.params) if not merged else fresh(first.params)
        merged.append(
            c.core.new_jaxpr_eqn(
                [v for v, _ in pairs],
                [out for _, out in pairs],
                first.primitive,
                params,
                effects,
                first.source_info,
            )
        )
    return merged


def _fuse_nested(eqn):
    """Fuses inside the body of a nested jit call."""
    if eqn.primitive.name not in ("jit", "pjit") or "jaxpr" not in eqn.params:
        return eqn
    closed = eqn.params["jaxpr"]
    fused = fuse_jaxpr(closed.jaxpr)
    if fused is closed.jaxpr:
        return eqn
    return eqn.replace(params={**eqn.params, "jaxpr": closed.replace(jaxpr=fused)})


def _is_var(v) -> bool:
    return isinstance(v, c.core.Var)


def _hashable(value):
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    return value


def install() -> None:
    """Fuses every shard_map body before JAX lowers it."""
    original = c.lowering_rule(c.shard_map_p)

    def lower_shard_map(ctx, *in_nodes, jaxpr, **params):
        return original(ctx, *in_nodes, jaxpr=fuse_jaxpr(jaxpr), **params)

    c.mlir.register_lowering(c.shard_map_p, lower_shard_map)
