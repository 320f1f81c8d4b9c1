"""The ``accl_pvary`` primitive: JAX's ``pvary`` (an invariant -> varying no-op cast along
mesh axes) whose transpose is jax_accl's all-reduce instead of XLA's.

Autodiff under ``check_vma=True`` turns the pvary of every replicated parameter into the
parameter's gradient all-reduce. Routing (jax_accl/routing.py) binds this primitive
where JAX would bind pvary, so that all-reduce is an ``accl_allreduce`` wherever the
transpose is traced. Every other rule is pvary's.
"""

from __future__ import annotations

from jax_accl import _compat as c

accl_pvary_p = c.core.Primitive("accl_pvary")
# The all-reduce its transpose is: jax_accl.reduction's (which binds this primitive
# itself, where JAX would pvary), installed by that module at its import, so that
# neither module imports the other.
_sum_over = None


def set_transpose_sum(sum_over) -> None:
    """`sum_over(ct, axes)`: the cotangent all-reduced over `axes`, invariant there."""
    global _sum_over
    _sum_over = sum_over


def bind(x, *, axes: tuple):
    return accl_pvary_p.bind(x, axes=tuple(axes))


def _transpose(ct, x, *, axes):
    return (_sum_over(ct, tuple(axes)),)


def _batcher(vals_in, dims_in, *, axes):
    (x,), (d,) = vals_in, dims_in
    return accl_pvary_p.bind(x, axes=axes), d


accl_pvary_p.def_impl(c.pvary_p.impl)
accl_pvary_p.def_abstract_eval(lambda aval, *, axes: c.pvary_p.abstract_eval(aval, axes=axes)[0])
c.ad.deflinear2(accl_pvary_p, _transpose)
c.batching.primitive_batchers[accl_pvary_p] = _batcher
c.mlir.register_lowering(accl_pvary_p, lambda ctx, x, *, axes: [x])
# An unreduced value (high from jax 0.12.1) is cast as its low value, as JAX's pvary does.
c.def_high_operands(accl_pvary_p, lambda xs, leading, *, axes: [bind(*xs, axes=axes)])
