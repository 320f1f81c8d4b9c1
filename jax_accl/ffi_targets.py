"""Loads the compiled module jax_accl._accl, checks that the installed jaxlib accepts its
FFI version, registers its XLA FFI targets for the CPU platform and its profiler plugin
with XLA's profiler, once per process."""

from __future__ import annotations

import glob
import os

import jax

PACKAGE = os.path.dirname(os.path.abspath(__file__))
_registered = False


def _missing_module_error(cause: ImportError) -> ImportError:
    """The error for an import of jax_accl that finds no compiled module: usually the
    source tree shadowing the installed package (Python puts the current directory first
    on sys.path)."""
    in_checkout = os.path.exists(os.path.join(PACKAGE, "..", "CMakeLists.txt"))
    where = (
        f"jax_accl was imported from the source tree {os.path.dirname(PACKAGE)}, "
        "which has no compiled module. Run Python from another directory so that the "
        "installed package is imported, or install the checkout in editable mode "
        "(pip install -e . --no-build-isolation)"
        if in_checkout
        else f"{PACKAGE} has no compiled module jax_accl._accl; reinstall jax_accl "
        "(pip install --force-reinstall jax_accl)"
    )
    return ImportError(f"{where}. ({type(cause).__name__}: {cause})")


def register() -> None:
    global _registered
    if _registered:
        return
    try:
        from jax_accl import _accl
    except ImportError as e:
        if glob.glob(os.path.join(PACKAGE, "_accl*.so")):
            raise  # the module is there and fails to load: its own error says why
        raise _missing_module_error(e) from None
    from jax_accl import _compat, ffi_version

    # Before any registration: jaxlib refuses handlers newer than its FFI when its CPU
    # backend starts, which would then not start at all.
    ffi_version.check_installed(_accl.ffi_api_version())
    # The state types first: XLA checks a handler's state type when the handler registers.
    for name, registration in _accl.state_types().items():
        _compat.register_ffi_type(name, registration)
    for name, stages in _accl.registrations().items():
        jax.ffi.register_ffi_target(name, stages, platform="cpu")
    # Every profiling session of the process asks the native core for its events
    # (xla_ffi/profiler/plugin_profiler.h).
    _compat.register_plugin_profiler(_accl.profiler_capsule())
    _registered = True
