"""Whether routing is on (jax_accl/routing.py): a leaf module, so the modules routing
binds through can ask without importing routing itself.

A JAX config state: thread-local when entered as a context, global when set with
jax.config.update (or JAX_ACCL_ROUTING=1); part of the jit and trace cache keys.
"""

from __future__ import annotations

from jax_accl import _compat as c
from jax_accl import config

state = c.define_bool_state(
    "jax_accl_routing",
    config.value("JAX_ACCL_ROUTING"),
    "Bind jax.lax's all-reduces, and those autodiff inserts, as jax_accl custom calls.",
)


def active() -> bool:
    return bool(state.value)


def active_globally() -> bool:
    return bool(state.get_global())
