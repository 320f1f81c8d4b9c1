"""The XLA FFI API versions of jax_accl's handlers and of the installed jaxlib, checked
before the handlers are registered.

A handler carries the FFI version of the headers it was compiled against
(third_party/xla: the oldest the package supports), and jaxlib refuses a handler newer
than its own FFI when its CPU backend starts, which then does not start at all (every
jax computation in the process fails). Refusing at import instead names both versions
and leaves jax usable."""

from __future__ import annotations

import os
import re

from jax_accl.errors import AcclError

Version = tuple[int, int]
_DEFINE = re.compile(r"^#define XLA_FFI_API_(MAJOR|MINOR) (\d+)\s*$", re.MULTILINE)


def header_version(c_api_h: str) -> Version:
    """(major, minor) as an XLA FFI c_api.h defines them."""
    with open(c_api_h, encoding="utf-8") as f:
        found = dict(_DEFINE.findall(f.read()))
    if set(found) != {"MAJOR", "MINOR"}:
        raise AcclError(f"{c_api_h} defines no XLA_FFI_API_MAJOR and XLA_FFI_API_MINOR")
    return int(found["MAJOR"]), int(found["MINOR"])


def jaxlib_c_api_h() -> str:
    """The c_api.h the installed jaxlib ships (jax.ffi.include_dir()), which defines the
    FFI version its XLA implements."""
    import jax

    return os.path.join(jax.ffi.include_dir(), "xla", "ffi", "api", "c_api.h")


def jaxlib_version() -> Version | None:
    """The installed jaxlib's FFI version, or None where it ships no headers to read."""
    path = jaxlib_c_api_h()
    return header_version(path) if os.path.exists(path) else None


def check(module: Version, jaxlib: Version | None, jaxlib_release: str) -> None:
    """Raises AcclError where jaxlib would refuse handlers of FFI version `module`: another
    major version, or an older minor one. Without jaxlib's version there is nothing to
    compare (a jaxlib built without its headers)."""
    if jaxlib is None or (jaxlib[0] == module[0] and jaxlib[1] >= module[1]):
        return
    raise AcclError(
        f"jax_accl's native module was compiled against XLA FFI API {module[0]}.{module[1]}, "
        f"but the installed jaxlib {jaxlib_release} implements FFI {jaxlib[0]}.{jaxlib[1]}, "
        "which refuses its handlers (and with them would not start its CPU backend). "
        "Install a jaxlib the package supports: pip install 'jaxlib>=0.10.2,<0.13'"
    )


def check_installed(module: Version) -> None:
    """check() against the jaxlib this process imports."""
    import jaxlib

    check(module, jaxlib_version(), jaxlib.__version__)
