"""A process that fails jax_accl's start-up says why in jax.distributed's key-value store,
and every other process's wait at start-up ends within seconds with that reason and
the failing process's id, where it waited for the timeout (2 minutes by default) and
died naming only the key it waited for."""

import subprocess
import sys
import time
from pathlib import Path

from jax_accl.testing import launch

SCRIPT = str(Path(__file__).parent / "scripts" / "start_up.py")
# Every process must have failed this soon after the first did.
WITHIN_S = 15.0


def start(process_id: int, coordinator: str, **env) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            SCRIPT,
            "--coordinator",
            coordinator,
            "--num-processes",
            "2",
            "--process-id",
            str(process_id),
        ],
        env=launch.worker_env({"JAX_ACCL_TIMEOUT_S": "120", **env}),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd="/",
    )


def failures(procs, deadline_s: float) -> list[str]:
    """Each process's FAILED line (or its whole output, where it printed none); a process
    still running at the deadline is killed."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end and any(p.poll() is None for p in procs):
        time.sleep(0.2)
    for p in procs:
        if p.poll() is None:
            p.kill()
    outputs = [p.communicate()[0] for p in procs]
    return [next((x for x in out.splitlines() if x.startswith("FAILED ")), out) for out in outputs]


def test_a_wrong_rail_on_one_process_fails_every_process_naming_it():
    coordinator = f"127.0.0.1:{launch.free_port()}"
    procs = [start(0, coordinator), start(1, coordinator, JAX_ACCL_RAILS="nosuch0")]
    lines = failures(procs, deadline_s=60)
    assert all(line.startswith("FAILED ") for line in lines), lines
    times = [float(line.split()[1]) for line in lines]
    assert max(times) - min(times) < WITHIN_S, lines
    assert "interface 'nosuch0' does not exist" in lines[1]
    assert "process 1 failed to start" in lines[0]
    assert "interface 'nosuch0' does not exist" in lines[0]
