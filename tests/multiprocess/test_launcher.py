"""The job launcher (jax_accl.testing.launch) that the multi-process tests, the benchmark
and the demo run on: its coordinator port, and a job whose process fails at start-up
ending in a report rather than in a wait for that process."""

import socket
import time

import pytest

from jax_accl.testing import launch

# A tool's test, whatever JAX's version: CI runs it on one Python (tests/conftest.py).
pytestmark = pytest.mark.once


def test_the_coordinator_port_is_outside_the_ephemeral_range_and_free(monkeypatch):
    low, high = launch.ephemeral_range()
    ports = {launch.free_port() for _ in range(50)}
    assert not any(low <= p <= high for p in ports), (low, high, sorted(ports))
    taken, free = sorted(ports)[:2]
    with socket.socket() as held:
        held.bind(("127.0.0.1", taken))
        draws = iter([taken, taken, free])
        monkeypatch.setattr(launch.random, "randint", lambda a, b: next(draws))
        assert launch.free_port() == free  # the held one skipped, twice


def test_a_process_that_dies_at_start_ends_the_job_at_once_with_a_report(monkeypatch):
    # Process 0 dies as if its coordinator could not bind; process 1 would wait for it
    # (jax.distributed waits 300 s by default). The job fails after the grace, naming why.
    monkeypatch.setattr(launch, "FAILED_PEER_GRACE_S", 2.0)
    script = (
        "import sys, time\n"
        "if sys.argv[sys.argv.index('--process-id') + 1] == '0':\n"
        "    print('coordinator: address in use', flush=True); sys.exit(3)\n"
        "time.sleep(120)\n"
    )
    start = time.monotonic()
    with pytest.raises(RuntimeError) as failure:
        launch.run_job(["-c", script], 2, 1, timeout=100)
    took = time.monotonic() - start
    assert took < 30, took
    report = str(failure.value)
    assert "--- process 0 (exit 3) ---" in report and "address in use" in report
    assert "[launcher: process 1 killed: process 0 failed (exit 3)]" in report
    assert "--- process 1 (exit -9) ---" in report


def test_every_process_output_and_result_comes_back():
    script = (
        "import json, sys\n"
        "i = int(sys.argv[sys.argv.index('--process-id') + 1])\n"
        "print('PROGRESS', json.dumps({'step': i}), flush=True)\n"
        "print('RESULT', json.dumps({'rank': i}))\n"
    )
    seen = []
    results = launch.run_job(["-c", script], 3, 1, on_progress=seen.append, timeout=60)
    assert results == [{"rank": 0}, {"rank": 1}, {"rank": 2}]
    assert seen == [{"step": 0}]  # process 0's progress only
