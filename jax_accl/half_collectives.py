"""float16 collectives JAX lowers itself, carried as types XLA:CPU's MPI layer takes.

With ``JAX_ACCL_XLA_COLLECTIVES=1`` XLA:CPU runs a program's collectives through MPI,
and its MPI layer maps the element type to an MPI datatype for an all-reduce, a
reduce-scatter and an all-gather; it has none for f16, so each of these fails on float16
("Unsupported primitive type for reduction: f16") before any MPI call (an all-to-all and
a collective-permute go as bytes and run). No XLA flag or CPU pass widens them
(docs/xla_collectives.md, "float16").

jax_accl registers CPU lowering rules for JAX's collective primitives that wrap JAX's
own: where an operand is float16 and jax_accl is XLA's collectives backend, the
collective is emitted on another type and the result turned back:

- all_gather: the bits as uint16, bitwise exact (all_to_all and ppermute need nothing);
- reductions (psum, pmax, pmin, psum_scatter, ...): widened to float32, reduced, and
  narrowed once. A max or min is exact; a sum rounds once, where a float16 sum that
  adds pairwise in float16 (gloo's, jax_accl's own ``psum``) rounds at every step: the
  same result with two summands, within an ulp per step with more.

Collectives XLA's partitioner inserts into a plain ``jax.jit`` program come after
lowering and stay XLA's (refused for float16). Elsewhere (gloo, another platform) the
rules call JAX's unchanged.
"""

from __future__ import annotations

from functools import partial

import numpy as np

# JAX's primitives (jax._src.lax.parallel), by what their collective does to the data.
# Missing names (another jax version) are skipped.
MOVES = ("all_gather", "all_gather_invariant")
REDUCES = (
    "psum",
    "pmax",
    "pmin",
    "psum_invariant",
    "reduce_scatter",
    "pmax_scatter",
    "pmin_scatter",
)

_installed: dict = {}  # primitive -> its name


def _not_told() -> bool:
    return False


# Whether XLA's collectives are jax_accl's in this process: xla_collectives.enabled, given
# by install (this module imports nothing of jax_accl's but _compat: no import circle).
_enabled = _not_told


def installed() -> dict:
    """The primitives whose CPU lowering jax_accl wraps, by name."""
    return {p.name: p for p in _installed}


def active() -> bool:
    """Whether XLA's CPU collectives run on jax_accl's MPI library in this process."""
    from jax_accl import _compat

    return _enabled() and _compat.cpu_collectives_implementation() == "mpi"


def install(enabled=None) -> None:
    """Registers the wrapping CPU rules once (after jax's import; idempotent); `enabled`:
    whether XLA's collectives are jax_accl's (xla_collectives.enabled; kept)."""
    global _enabled
    from jax_accl import _compat

    if enabled is not None:
        _enabled = enabled
    for names, carrier in ((MOVES, np.uint16), (REDUCES, np.float32)):
        for name in names:
            prim = _compat.parallel_primitive(name)
            if prim is None or prim in _installed:
                continue
            if _compat.wrap_cpu_lowering(prim, partial(_wrapping, carrier=np.dtype(carrier))):
                _installed[prim] = name


def _wrapping(rule, carrier: np.dtype):
    from jax_accl import _compat

    bitcast = carrier == np.uint16

    def lower(ctx, *args, **params):
        if not any(_is_half(a) for a in ctx.avals_in) or not active():
            return rule(ctx, *args, **params)
        avals_in = [_carried(a, carrier) for a in ctx.avals_in]
        avals_out = [_carried(a, carrier) for a in ctx.avals_out]
        args = [
            _compat.convert_hlo(ctx, x, new, bitcast) if _is_half(old) else x
            for x, old, new in zip(args, ctx.avals_in, avals_in)
        ]
        outs = rule(ctx.replace(avals_in=avals_in, avals_out=avals_out), *args, **params)
        return [
            _compat.convert_hlo(ctx, y, old, bitcast) if _is_half(old) else y
            for y, old in zip(outs, ctx.avals_out)
        ]

    return lower


def _is_half(aval) -> bool:
    return getattr(aval, "dtype", None) == np.float16


def _carried(aval, carrier: np.dtype):
    return aval.update(dtype=carrier) if _is_half(aval) else aval
