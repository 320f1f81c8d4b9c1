"""jax_accl's logging: silent by default; ``JAX_ACCL_DEBUG=INFO`` prints the topology,
the rails and the algorithm chosen for each (group, size) once; ``JAX_ACCL_DEBUG=DEBUG``
also has the native core print one line per all-reduce per device (to stderr)."""

from __future__ import annotations

import logging

from jax_accl import _accl, config

logger = logging.getLogger("jax_accl")
_seen: set = set()


def _configure() -> None:
    level = config.value("JAX_ACCL_DEBUG")
    _accl.set_debug_calls(level == "DEBUG")
    if not level:
        logger.addHandler(logging.NullHandler())
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("jax_accl %(levelname)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False


def once(key, message: str, *args) -> None:
    """Logs at INFO the first time `key` is seen in this process."""
    if key in _seen or not logger.isEnabledFor(logging.INFO):
        return
    _seen.add(key)
    logger.info(message, *args)


_configure()
