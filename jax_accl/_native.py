"""Loads the native module and registers its XLA FFI targets for the CPU platform."""
import jax

from jax_accl import _accl

_registered = False


def register_targets() -> None:
    global _registered
    if _registered:
        return
    for name, capsule in _accl.registrations().items():
        jax.ffi.register_ffi_target(name, capsule, platform="cpu")
    _registered = True
