"""Counters of the native core: calls, bytes and time per algorithm."""
from jax_accl import _accl


def stats() -> dict:
    """{"algorithms": {name: {"calls", "bytes", "seconds", "errors"}}, "reduce_isa": ...}."""
    return {"algorithms": _accl.stats(), "reduce_isa": _accl.reduce_isa()}


def reset_stats() -> None:
    _accl.reset_stats()
