"""A signal that ends a launcher (python -m jax_accl.demo / jax_accl.bench) ends its
workers within seconds and removes what it made: SIGTERM (a scheduler's kill), SIGHUP
(a closed terminal), and with --hosts the network namespaces. SIGTERM reaches the
launcher while its workers run jax.distributed, whose preemption notifier takes SIGTERM
in them: the launcher still ends them. Without this the launcher died alone and its
workers trained on, orphaned, beside the namespaces."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

# How soon after the signal the launcher and every worker must be gone.
ENDED_WITHIN_S = 10.0
# How long a launcher may take to start its workers on a busy machine.
START_S = 90.0


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def alive(pid: int) -> bool:
    """Running (a zombie is not: it has ended, its parent has not reaped it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def launch(*argv: str) -> tuple[subprocess.Popen, list[str]]:
    """The launcher in a session of its own (our signals reach it alone); its output
    lines as they come."""
    proc = subprocess.Popen(
        [sys.executable, "-m", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd="/",
        start_new_session=True,
    )
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    return proc, lines


def wait_until(condition, seconds: float, what: str) -> None:
    end = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < end, f"waited {seconds}s for {what}"
        time.sleep(0.2)


def ended(launcher: subprocess.Popen, workers: list[int], signum: int, lines) -> None:
    """Sends `signum` to the launcher alone; it and every worker must end in time."""
    os.kill(launcher.pid, signum)
    try:
        launcher.wait(ENDED_WITHIN_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the launcher outlived {signum!r} by {ENDED_WITHIN_S}s: {lines[-5:]}")
    wait_until(lambda: not any(alive(w) for w in workers), ENDED_WITHIN_S, "the workers to end")
    assert launcher.returncode == 128 + signum


def kill_all(launcher: subprocess.Popen, workers: list[int]) -> None:
    """Whatever the test left running: the launcher's process group (its workers are in
    it, orphaned or not)."""
    for pid in [launcher.pid, *workers]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    launcher.wait()


@pytest.mark.parametrize(
    "signum, argv",
    [
        # A worker's line: jax.distributed is up there, its preemption notifier too.
        (signal.SIGTERM, ["jax_accl.demo", "--processes", "2", "--steps", "100000"]),
        (signal.SIGHUP, ["jax_accl.bench", "--processes", "2", "--reps", "1000"]),
    ],
    ids=["demo-SIGTERM", "bench-SIGHUP"],
)
def test_a_signal_to_the_launcher_ends_its_workers(signum, argv):
    launcher, lines = launch(*argv)
    workers: list[int] = []
    try:
        wait_until(lambda: len(children(launcher.pid)) == 2, START_S, "two workers")
        workers = children(launcher.pid)
        if argv[0] == "jax_accl.demo":
            wait_until(lambda: any("MLP" in x for x in lines), START_S, "training to begin")
        else:
            time.sleep(2)
        ended(launcher, workers, signum, lines)
    finally:
        kill_all(launcher, workers)


def namespace_of(pid: int) -> str:
    done = subprocess.run(["ip", "netns", "identify", str(pid)], capture_output=True, text=True)
    return done.stdout.strip()


def namespaces() -> set[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in listed.splitlines() if line.strip()}


def test_a_signal_to_a_launcher_on_namespaced_hosts_removes_them(root_required):
    launcher, lines = launch("jax_accl.demo", "--hosts", "2", "--steps", "100000")
    workers: list[int] = []
    made: set[str] = set()
    try:
        wait_until(lambda: len(children(launcher.pid)) == 2, START_S, "two workers")
        workers = children(launcher.pid)
        wait_until(lambda: all(namespace_of(w) for w in workers), START_S, "the hosts")
        tags = {namespace_of(w).rsplit("-", 1)[1] for w in workers}
        made = {ns for ns in namespaces() if ns.rsplit("-", 1)[-1] in tags}
        assert len(made) == 3, made  # two hosts and their switch
        ended(launcher, workers, signal.SIGTERM, lines)
        assert not made & namespaces()
    finally:
        kill_all(launcher, workers)
        for ns in made & namespaces():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
