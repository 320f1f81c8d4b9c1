"""A short fuzzing run of the wire parsers in CI (the long run: see fuzz_wire.py)."""

import resource
import subprocess
import sys
from pathlib import Path

import pytest

# libFuzzer's memory limit, in MiB over what the fuzzer starts with: Linux carries a
# process's peak resident size across fork and exec, so a fuzzer started by a test
# process that grew (a pytest worker after the in-process tests) starts at that
# process's peak, and libFuzzer's own limit (2048 MiB) would count it.
GROWTH_LIMIT_MB = 2048


@pytest.mark.multiprocess  # the fuzzer runs in a process of its own
def test_wire_parsers_survive_fuzzing():
    start_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    limits = [f"-rss_limit_mb={start_mb + GROWTH_LIMIT_MB}", f"-malloc_limit_mb={GROWTH_LIMIT_MB}"]
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("fuzz_wire.py")), "-runs=20000", "-seed=7"]
        + limits,
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Done 20000 runs" in done.stderr
