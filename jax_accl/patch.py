"""Route existing code's jax.lax collectives through jax_accl without editing it."""

from __future__ import annotations

import contextlib
import threading

import jax

from jax_accl import api, routing

_PATCHED = {"psum": api.psum, "pmean": api.pmean, "pmax": api.pmax, "pmin": api.pmin}
_lock = threading.Lock()
_depth = 0
_originals: dict = {}
_routing_before = False


@contextlib.contextmanager
def patch_psum():
    """Within this block, ``jax.lax.psum``, ``pmean``, ``pmax`` and ``pmin`` are jax_accl's,
    and so is every all-reduce JAX binds itself: ``psum_invariant``, and the gradient
    all-reduce autodiff makes of the implicit ``pvary`` of replicated parameters (see
    jax_accl/routing.py).

    It acts on programs *traced* inside the block (jit traces on first call, and traces
    again on a call inside the block what it traced outside). The patch is process-wide
    while active; blocks may nest. For one function only, use ``jax_accl.shard_map`` or
    the ``jax_accl.routed`` decorator instead.
    """
    global _depth, _routing_before
    with _lock:
        if _depth == 0:
            _routing_before = routing.active_globally()
            routing.set_global(True)
            for name, replacement in _PATCHED.items():
                _originals[name] = getattr(jax.lax, name)
                setattr(jax.lax, name, replacement)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                for name, original in _originals.items():
                    setattr(jax.lax, name, original)
                _originals.clear()
                routing.set_global(_routing_before)
