"""jax_accl's interpreter start-up hook (startup/: jax_accl_xla_collectives.pth and
_jax_accl_startup.py, installed in site-packages): with JAX_ACCL_XLA_COLLECTIVES=1 a fresh
Python points MPItrampoline at jax_accl's library and imports jax_accl with jax, imports
neither at start-up; without the variable it changes nothing; with it 0, an MPI library
inherited from a parent with it 1 is dropped."""

import json
import subprocess
import sys

import pytest

from jax_accl import xla_collectives
from jax_accl.testing import launch

SITE = launch.PACKAGE_ROOT.parent
pytestmark = pytest.mark.multiprocess  # a fresh interpreter each (tests/conftest.py)
SHOW = (
    "import json, os, sys; print(json.dumps({k: os.environ.get(k) for k in "
    "('MPITRAMPOLINE_LIB', 'JAX_CPU_COLLECTIVES_IMPLEMENTATION')} | "
    "{'modules': sorted(m for m in ('jax', 'jax_accl') if m in sys.modules)}))"
)


def fresh_python(code: str, **env) -> dict:
    base = launch.worker_env()
    for name in ("JAX_ACCL_XLA_COLLECTIVES", "MPITRAMPOLINE_LIB"):
        base.pop(name, None)
    base.pop("JAX_CPU_COLLECTIVES_IMPLEMENTATION", None)
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def fresh_run(code: str, *options: str, **env) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter (with `options`), the hook's variables as `env` says."""
    base = launch.worker_env()
    for name in (
        "JAX_ACCL_XLA_COLLECTIVES",
        "MPITRAMPOLINE_LIB",
        "JAX_CPU_COLLECTIVES_IMPLEMENTATION",
    ):
        base.pop(name, None)
    return subprocess.run(
        [sys.executable, *options, "-c", code],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )


def test_a_misspelt_knob_is_named_at_start_up_in_a_script_without_jax_accl():
    done = fresh_run("print('ran')", JAX_ACCL_XLA_COLLECTIVE="1")
    assert done.returncode == 0 and done.stdout == "ran\n"
    assert "JAX_ACCL_XLA_COLLECTIVE is not a jax_accl knob" in done.stderr
    assert "did you mean JAX_ACCL_XLA_COLLECTIVES?" in done.stderr
    assert done.stderr.count("did you mean") == 1  # once, though site may read the .pth twice


def test_a_value_the_hook_cannot_read_fails_the_import_of_jax():
    done = fresh_run("import jax", JAX_ACCL_XLA_COLLECTIVES="yes")
    assert done.returncode != 0
    assert "JAX_ACCL_XLA_COLLECTIVES='yes': expected 0 or 1" in done.stderr


def test_a_misspelt_knob_is_warned_of_at_import_where_the_hook_did_not_run():
    # -S: no site, so no .pth hook; site-packages on PYTHONPATH instead.
    code = "import warnings; warnings.simplefilter('error'); import jax_accl"
    done = fresh_run(code, "-S", JAX_ACCL_TIMEOUT="5", PYTHONPATH=str(SITE))
    assert done.returncode != 0
    assert "AcclWarning: jax_accl: JAX_ACCL_TIMEOUT is not a jax_accl knob" in done.stderr
    assert "did you mean JAX_ACCL_TIMEOUT_S?" in done.stderr


def test_installed_next_to_the_package():
    assert (SITE / "jax_accl_xla_collectives.pth").is_file()
    assert (SITE / "_jax_accl_startup.py").is_file()


def test_without_the_variable_nothing_changes():
    shown = fresh_python(SHOW)
    assert shown == {
        "MPITRAMPOLINE_LIB": None,
        "JAX_CPU_COLLECTIVES_IMPLEMENTATION": None,
        "modules": [],
    }


def test_with_it_the_library_is_set_at_start_up_and_jax_brings_jax_accl():
    at_start = fresh_python(SHOW, JAX_ACCL_XLA_COLLECTIVES="1")
    assert at_start == {
        "MPITRAMPOLINE_LIB": str(xla_collectives.LIBRARY),
        "JAX_CPU_COLLECTIVES_IMPLEMENTATION": "mpi",
        "modules": [],  # nothing imported until the script imports jax
    }
    after_jax = fresh_python("import jax\n" + SHOW, JAX_ACCL_XLA_COLLECTIVES="1")
    assert after_jax["modules"] == ["jax", "jax_accl"]


def test_a_lookup_of_jax_before_its_import_does_not_use_the_hook_up():
    """A library asking whether jax is installed (importlib.util.find_spec) before the
    script imports it: jax still brings jax_accl."""
    code = "import importlib.util\nassert importlib.util.find_spec('jax')\nimport jax\n"
    shown = fresh_python(code + SHOW, JAX_ACCL_XLA_COLLECTIVES="1")
    assert shown["modules"] == ["jax", "jax_accl"]


def test_a_child_with_it_0_drops_the_library_its_parent_set():
    shown = fresh_python(
        SHOW,
        JAX_ACCL_XLA_COLLECTIVES="0",
        MPITRAMPOLINE_LIB=str(xla_collectives.LIBRARY),
        JAX_CPU_COLLECTIVES_IMPLEMENTATION="mpi",
    )
    assert shown["MPITRAMPOLINE_LIB"] is None
    assert shown["JAX_CPU_COLLECTIVES_IMPLEMENTATION"] is None
    other = fresh_python(SHOW, JAX_ACCL_XLA_COLLECTIVES="0", MPITRAMPOLINE_LIB="/opt/libmpi.so")
    assert other["MPITRAMPOLINE_LIB"] == "/opt/libmpi.so"  # not jax_accl's: kept
    # Unset (another knob set, which runs the hook too): the library is left as it is
    # (jax_accl's own check of a jaxlib loads it in a child so).
    unset = fresh_python(
        SHOW, JAX_ACCL_TIMEOUT_S="60", MPITRAMPOLINE_LIB=str(xla_collectives.LIBRARY)
    )
    assert unset["MPITRAMPOLINE_LIB"] == str(xla_collectives.LIBRARY)


def test_the_knob_table_prints_without_a_runpy_warning():
    done = subprocess.run(
        [sys.executable, "-m", "jax_accl.config"], capture_output=True, text=True, cwd="/"
    )
    assert done.returncode == 0 and done.stdout.startswith("| variable |")
    assert "RuntimeWarning" not in done.stderr, done.stderr
