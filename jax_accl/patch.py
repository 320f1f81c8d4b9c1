"""Route existing code's jax.lax collectives through jax_accl without editing it."""
from __future__ import annotations

import contextlib
import threading

import jax

from jax_accl import api

_PATCHED = {"psum": api.psum, "pmean": api.pmean, "pmax": api.pmax, "pmin": api.pmin}
_lock = threading.Lock()
_depth = 0
_originals: dict = {}


@contextlib.contextmanager
def patch_psum():
    """Within this block, ``jax.lax.psum``, ``pmean``, ``pmax`` and ``pmin`` are jax_accl's.

    It acts on programs *traced* inside the block (jit traces on first call), for code
    that looks the functions up as ``jax.lax.psum`` at call time (optax, flax and most
    training loops do). The patch is process-wide while active; blocks may nest.
    """
    global _depth
    with _lock:
        if _depth == 0:
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
