"""The bench keeps what it measured: what a run needs is checked before anything is
measured (--mpi on where MPI cannot run is an error at once, where it measured every
size first and then raised), and a baseline that fails mid-run is reported as failed
beside the rows the others measured. So does the demo: without optax (its `demo` extra)
it says how to install it, where every worker raised an ImportError."""

import argparse
import os
import subprocess
import sys
import time

import pytest

from jax_accl.bench import mpi

# A tool's test, whatever JAX's version: CI runs it on one Python (tests/conftest.py).
pytestmark = pytest.mark.once


@pytest.mark.multiprocess  # python -m jax_accl.bench
def test_mpi_on_without_mpi_is_an_error_before_any_measuring():
    began = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jax_accl.bench",
            "--processes",
            "2",
            "--devices",
            "1",
            "--sizes",
            "4KiB",
            "--reps",
            "1",
            "--mpi",
            "on",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",
        # No MPI: whatever is installed, MPIRUN names a program that does not exist.
        env=dict(os.environ, MPIRUN="/nonexistent/mpirun"),
    )
    assert done.returncode != 0
    assert "--mpi on: " in done.stderr and "install_mpi.sh" in done.stderr
    assert "processes x devices" not in done.stdout + done.stderr  # no job was started
    assert time.monotonic() - began < 60


def test_a_baseline_that_fails_is_reported_and_the_rows_kept(monkeypatch):
    def fails(*_args, **_kwargs):
        raise RuntimeError("MPI baseline failed (exit 1):\nmpirun: no slots")

    monkeypatch.setattr(mpi, "run", fails)
    rows = [
        {"devices": 2, "size_bytes": 4096, "variant": v, "seconds_per_op": 1e-4}
        for v in ("jax.lax.psum", "accl:auto")
    ]
    kept = [dict(r) for r in rows]
    args = argparse.Namespace(mpi="on", sizes="4KiB", loop=1, reps=1)
    lines = mpi.add_mpi_rows(rows, args, "2x1 processes x devices, one host")
    assert rows == kept
    assert lines[0].startswith("MPI baseline FAILED (no mpi4jax rows): ")
    assert "mpirun: no slots" in lines[0]


@pytest.mark.multiprocess  # python -m jax_accl.demo
def test_the_demo_without_optax_says_how_to_install_it(tmp_path):
    # optax not importable: a package of that name first on the path that says so.
    (tmp_path / "optax").mkdir()
    (tmp_path / "optax" / "__init__.py").write_text(
        "raise ImportError(\"No module named 'optax'\")"
    )
    done = subprocess.run(
        [sys.executable, "-m", "jax_accl.demo", "--processes", "2", "--steps", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",
        env=dict(os.environ, PYTHONPATH=str(tmp_path)),
    )
    assert done.returncode != 0
    assert 'pip install ".[demo]"' in done.stderr
    assert "Traceback" not in done.stderr and "RESULT" not in done.stdout
