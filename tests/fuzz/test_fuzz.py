"""A short fuzzing run of the wire parsers in CI (the long run: see fuzz_wire.py)."""

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.multiprocess  # the fuzzer runs in a process of its own
def test_wire_parsers_survive_fuzzing():
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("fuzz_wire.py")), "-runs=20000", "-seed=7"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Done 20000 runs" in done.stderr
