"""Routing: JAX's own all-reduces, and the ones autodiff inserts, bound as jax_accl's.

Where routing is on, a program traced there has no XLA all-reduce left:

* ``jax.lax.psum`` / ``pmean`` / ``pmax`` / ``pmin`` (and JAX-internal callers of their
  primitives: ``psum_invariant``, ``psum``, ``pmax``, ``pmin``) bind ``accl_allreduce``;
* ``pvary`` (explicit, or inserted by JAX under ``check_vma=True`` where a replicated
  value meets a varying one) binds ``accl_pvary``: the same no-op cast, whose transpose
  (the gradient all-reduce of a replicated parameter) is an ``accl_allreduce``. So the
  gradient is ours wherever the transpose is traced, inside the routed body or outside;
* a reduction of a value typed invariant along the axes (a replicated input, or
  gradients that autodiff already reduced) communicates as JAX's does: each device's
  buffer is summed, whatever the type says (with ``jax_auto_pcast`` off it is refused
  where JAX refuses it);
* ``jax.lax.psum_scatter``, ``all_gather`` (``to='varying'`` and ``'invarying'``),
  ``ppermute``, ``all_to_all`` and ``ragged_all_to_all`` bind jax_accl's
  reduce-scatter, all-gather, permutation and all-to-alls, and so do
  the transposes JAX makes of them (an all-gather's is a reduce-scatter): sharded
  training (FSDP, tensor and pipeline parallelism) runs on jax_accl, backward pass
  included; so do ``all_gather(to='reduced')`` and ``psum_scatter`` of an unreduced
  value (JAX's reduced and unreduced types), each the other's transpose. JAX's
  ``unreduced_psum`` stays JAX's.

Routing is on process-wide inside ``jax_accl.patch_psum()`` and with the environment
variable ``JAX_ACCL_ROUTING=1``; for one thread and one body inside
``jax_accl.shard_map`` and functions decorated with ``jax_accl.routed``. It is part of
JAX's trace context, so a jitted function traced with routing off is traced again when
called with it on, and the other way round.
"""

from __future__ import annotations

import functools
import threading

from jax_accl import _compat as c
from jax_accl import all_to_all, permute, reduction, routing_state, scatter_gather
from jax_accl.primitives import pvary as accl_pvary

_install_lock = threading.Lock()
_installed = False
active = routing_state.active
active_globally = routing_state.active_globally


def scope():
    """A context (this thread) in which collectives traced are jax_accl's."""
    install()
    return routing_state.state(True)


def set_global(on: bool) -> None:
    install()
    c.update_config("jax_accl_routing", bool(on))


def routed(fn):
    """Decorator: every collective traced inside `fn` is jax_accl's (see module doc)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with scope():
            return fn(*args, **kwargs)

    return wrapper


def install() -> None:
    """Puts the routing hooks on JAX's collective primitives (once; while routing is off
    they hand every bind to JAX unchanged)."""
    global _installed
    with _install_lock:
        if _installed:
            return
        c.hook_bind(c.pvary_p, lambda bind: _when_routed(bind, accl_pvary.bind))
        c.hook_bind(c.psum_invariant_p, lambda bind: _routed_reduction(bind, "sum", True))
        c.hook_bind(c.psum_p, lambda bind: _routed_reduction(bind, "sum", False))
        c.hook_bind(c.pmax_p, lambda bind: _routed_reduction(bind, "max", None))
        c.hook_bind(c.pmin_p, lambda bind: _routed_reduction(bind, "min", None))
        c.hook_bind_psum_invariant(_routed_bind_psum_invariant)
        c.hook_bind(c.reduce_scatter_p, _routed_reduce_scatter)
        c.hook_bind(c.all_gather_p, lambda bind: _routed_all_gather(bind, "varying"))
        c.hook_bind(c.all_gather_invariant_p, lambda bind: _routed_all_gather(bind, "invarying"))
        c.hook_bind(c.ppermute_p, _routed_ppermute)
        c.hook_bind(c.all_to_all_p, _routed_all_to_all)
        c.hook_bind(c.ragged_all_to_all_p, _routed_ragged_all_to_all)
        if c.all_gather_reduced_p is not None:
            c.hook_bind(c.all_gather_reduced_p, lambda bind: _routed_all_gather(bind, "reduced"))
        if c.unreduced_reduce_scatter_p is not None:
            c.hook_bind(c.unreduced_reduce_scatter_p, _routed_reduce_scatter)
        _installed = True


def install_transposes() -> None:
    """At import: shard_map's transpose rule routes where its body holds jax_accl calls
    (hands everything else to JAX's rule unchanged)."""
    c.hook_transpose(c.shard_map_p, _routed_shard_map_transpose)


def _routed_shard_map_transpose(jax_rule):
    """A shard_map whose body holds jax_accl calls is transposed with routing on, where
    the gradient is taken outside it (jax.grad(jax_accl.shard_map(...)), or a plain
    jax.shard_map around jax_accl.psum): the all-reduces its transpose adds (the
    transposes of pvary under check_vma=True; the sum of replicated inputs' cotangents
    under check_vma=False) are then jax_accl's too."""

    def rule(out_cts, *args, jaxpr, **params):
        if active() or not any(n.startswith("accl_") for n in c.primitive_names_in(jaxpr)):
            return jax_rule(out_cts, *args, jaxpr=jaxpr, **params)
        with scope():
            return jax_rule(out_cts, *args, jaxpr=jaxpr, **params)

    return rule


def _routed_reduction(jax_bind, op: str, invariant):
    """A bind of one of JAX's reduction primitives as accl_allreduce, with the result
    type JAX's gives: psum_invariant's invariant (True), psum's unchanged (False, it is
    bound under check_vma=False), pmax's and pmin's as check_vma says (None)."""

    def bind(x, *, axes, **params):
        if not active():
            return jax_bind(x, axes=axes, **params)
        if invariant:  # JAX's own rules bind it: it refuses what JAX's would refuse
            c.check_psum_invariant(x, tuple(axes))
        return reduction.reduce_leaves(
            [x], tuple(axes), op=op, groups=params.get("axis_index_groups"), invariant=invariant
        )[0]

    return bind


def _routed_bind_psum_invariant(jax_fn):
    """jax.lax.psum's leaf bind under check_vma=True: routed, it all-reduces the leaf
    along all `axes`, as JAX's (which pvaries it along the axes it is invariant along,
    then binds psum_invariant): reduction.reduce_leaves does both."""

    def bind(leaf, *, axes, axis_index_groups, is_async):
        if not active() or is_async:
            return jax_fn(leaf, axes=axes, axis_index_groups=axis_index_groups, is_async=is_async)
        if axis_index_groups is not None:
            raise NotImplementedError("axis_index_groups needs check_vma=False (as jax.lax.psum)")
        (out,) = reduction.reduce_leaves([leaf], tuple(axes), op="sum", invariant=True)
        return out

    return bind


def _when_routed(jax_bind, accl_bind):
    """A bind that is accl_bind(x, **params) while routing is on, JAX's own otherwise."""

    def bind(x, **params):
        return accl_bind(x, **params) if active() else jax_bind(x, **params)

    return bind


def _routed_reduce_scatter(jax_bind):
    """reduce_scatter_p, or unreduced_reduce_scatter_p (no axis_index_groups; its operand
    unreduced, which jax_accl.psum_scatter reads from the type)."""

    def accl(x, *, axis_name, scatter_dimension, axis_size, tiled, axis_index_groups=None):
        return scatter_gather.psum_scatter(
            x,
            axis_name,
            scatter_dimension=scatter_dimension,
            axis_index_groups=axis_index_groups,
            tiled=tiled,
        )

    return _when_routed(jax_bind, accl)


def _routed_all_gather(jax_bind, to: str):
    """all_gather_p (to='varying', with axis_index_groups), all_gather_invariant_p
    (to='invarying', without) or all_gather_reduced_p (to='reduced', without);
    `all_gather_dimension` is already in range."""

    def accl(x, *, all_gather_dimension, axis_name, axis_size, tiled, axis_index_groups=None):
        return scatter_gather.all_gather(
            x,
            axis_name,
            axis_index_groups=axis_index_groups,
            axis=all_gather_dimension,
            tiled=tiled,
            to=to,
        )

    return _when_routed(jax_bind, accl)


def _routed_ppermute(jax_bind):
    return _when_routed(
        jax_bind, lambda x, *, axis_name, perm: permute.ppermute(x, axis_name, perm)
    )


def _routed_all_to_all(jax_bind):
    """all_to_all_p, as jax.lax.all_to_all binds it: tiled at the primitive (the untiled
    form is a size-1 dimension it inserts and drops around the bind)."""

    def accl(x, *, axis_name, split_axis, concat_axis, axis_index_groups, tiled):
        return all_to_all.all_to_all(
            x, axis_name, split_axis, concat_axis, axis_index_groups=axis_index_groups, tiled=True
        )

    return _when_routed(jax_bind, accl)


def _routed_ragged_all_to_all(jax_bind):
    """ragged_all_to_all_p: (operand, output, input_offsets, send_sizes, output_offsets,
    recv_sizes) and the axes."""

    def bind(*args, axis_name, axis_index_groups):
        if not active():
            return jax_bind(*args, axis_name=axis_name, axis_index_groups=axis_index_groups)
        return all_to_all.ragged_all_to_all(
            *args, axis_name=axis_name, axis_index_groups=axis_index_groups
        )

    return bind
