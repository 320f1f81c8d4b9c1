"""One binary for every supported jaxlib: the native module is compiled against the
vendored XLA FFI headers (third_party/xla, those of the oldest supported jaxlib) whatever
jaxlib the build finds, and a jaxlib whose FFI is older than the module's is refused at
import with both versions named, its CPU backend left working."""

import base64
import hashlib
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from jax_accl import _accl, ffi_version
from jax_accl.errors import AcclError

REPO = Path(__file__).resolve().parents[2]
VENDORED = REPO / "third_party" / "xla"
VENDORED_C_API = VENDORED / "xla" / "ffi" / "api" / "c_api.h"
# The oldest supported jaxlib (pyproject.toml's floor) and the FFI version it ships.
FLOOR_JAXLIB, FLOOR_FFI = "0.10.2", (0, 3)


def test_the_module_carries_the_vendored_ffi_version():
    assert ffi_version.header_version(str(VENDORED_C_API)) == FLOOR_FFI
    assert tuple(_accl.ffi_api_version()) == FLOOR_FFI


def test_the_vendored_headers_are_jaxlib_0_10_2s_unmodified():
    """Their sha256 as the jaxlib wheel's RECORD lists them (the table of the README)."""
    readme = (VENDORED / "README.md").read_text()
    listed = dict(re.findall(r"^\| (\w+\.h) \| ([\w-]+) \|$", readme, re.MULTILINE))
    assert set(listed) == {"api.h", "c_api.h", "ffi.h"}
    for name, digest in listed.items():
        data = (VENDORED_C_API.parent / name).read_bytes()
        actual = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert actual == digest, f"{name} differs from jaxlib {FLOOR_JAXLIB}'s"
    assert "Apache License" in (VENDORED / "LICENSE").read_text()
    assert f"jaxlib {FLOOR_JAXLIB} wheel" in readme


def test_the_floor_is_pyprojects():
    """Raising the supported floor means vendoring that jaxlib's headers (and this test's
    FLOOR_* with them)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert f"jaxlib>={FLOOR_JAXLIB},<0.13" in project["project"]["dependencies"]
    assert f"jax>={FLOOR_JAXLIB},<0.13" in project["project"]["dependencies"]
    # The build needs no jaxlib: it would otherwise pull the newest one's headers.
    assert not any(r.startswith("jaxlib") for r in project["build-system"]["requires"])


def test_the_installed_jaxlib_accepts_the_module():
    installed = ffi_version.jaxlib_version()
    assert installed is not None and installed[0] == FLOOR_FFI[0]
    assert installed[1] >= FLOOR_FFI[1]
    ffi_version.check(tuple(_accl.ffi_api_version()), installed, "installed")


@pytest.mark.parametrize("jaxlib", [(0, 3), (0, 4), (0, 5), None])
def test_an_equal_or_newer_ffi_passes(jaxlib):
    ffi_version.check((0, 3), jaxlib, "x")


@pytest.mark.parametrize("jaxlib", [(0, 2), (0, 0), (1, 3)])
def test_an_older_or_other_major_ffi_is_refused_naming_both(jaxlib):
    with pytest.raises(AcclError) as caught:
        ffi_version.check((0, 3), jaxlib, "0.9.9")
    message = str(caught.value)
    assert "XLA FFI API 0.3" in message
    assert f"jaxlib 0.9.9 implements FFI {jaxlib[0]}.{jaxlib[1]}" in message
    assert "jaxlib>=0.10.2,<0.13" in message


def test_a_header_without_the_version_is_an_error(tmp_path):
    header = tmp_path / "c_api.h"
    header.write_text("#define XLA_FFI_API_MAJOR 0\n")
    with pytest.raises(AcclError, match="defines no XLA_FFI_API_MAJOR and XLA_FFI_API_MINOR"):
        ffi_version.header_version(str(header))


@pytest.mark.multiprocess  # a fresh interpreter: jax_accl is imported there
def test_an_older_jaxlib_is_refused_at_import_and_jax_still_runs(tmp_path):
    """A jaxlib that reports FFI 0.2 (its c_api.h replaced for the child): the import of
    jax_accl raises AcclError naming both versions, and jax's CPU backend starts after."""
    api = tmp_path / "include" / "xla" / "ffi" / "api"
    api.mkdir(parents=True)
    (api / "c_api.h").write_text("#define XLA_FFI_API_MAJOR 0\n#define XLA_FFI_API_MINOR 2\n")
    child = textwrap.dedent(f"""
        import jax, jax.numpy as jnp
        jax.ffi.include_dir = lambda: {str(tmp_path / "include")!r}
        try:
            import jax_accl
        except Exception as e:
            print("REFUSED", type(e).__name__, e)
        print("SUM", float(jnp.arange(4.0).sum()), len(jax.devices()))
    """)
    done = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert "REFUSED AcclError jax_accl's native module was compiled against XLA FFI API 0.3" in (
        done.stdout
    )
    assert "implements FFI 0.2" in done.stdout
    assert "SUM 6.0" in done.stdout
