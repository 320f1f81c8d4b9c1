"""python -m jax_accl.demo.moe in CI's short mode: expert parallelism with the dense and
the ragged all-to-all, every collective of the compiled step jax_accl's, each run equal
to its single-device reference (the demo checks both and fails otherwise)."""

import os
import subprocess
import sys

import pytest


@pytest.mark.multiprocess  # a subprocess with its own 8 CPU devices
def test_moe_demo_short_run_matches_its_reference():
    done = subprocess.run(
        [sys.executable, "-m", "jax_accl.demo.moe", "--steps", "12"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd="/",
        env={**os.environ, "XLA_FLAGS": ""},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "results equal the single-device reference" in out, out
    assert "ragged (no padding, no drop)" in out and "on jax.lax" in out, out
    losses = [line.split() for line in out.splitlines() if line[:4].strip().isdigit()]
    assert len(losses) == 12 and float(losses[-1][1]) < float(losses[0][1]), out
