"""The README's retry loop (examples/two_hosts.py, without recoverability) when a peer
process of a host is SIGKILLed or interrupted (Ctrl-C) mid-training: the other process's
step raises with jax_accl's message, which says to restart the job, so the loop raises
it instead of calling jax_accl.recover() and waiting for a peer that never comes (before,
recover() waited until JAX's heartbeat aborted the process, the message never shown). An
interrupted process tells its peer it left; the peer's error names that, and both end."""

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "two_hosts.py"


def _start(i, coordinator, env):
    cmd = [sys.executable, "-u", str(EXAMPLE), "--coordinator", coordinator]
    cmd += ["--num-processes", "2", "--process-id", str(i), "--steps", "1000000", "--width", "32"]
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd="/"
    )
    lines = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    return proc, lines


def _until(condition, what, outputs, timeout=240):
    end = time.monotonic() + timeout  # a guard against a hang, not a measurement
    while not condition():
        if time.monotonic() >= end:
            tails = "\n".join(f"--- {name}:\n{''.join(lines[-30:])}" for name, lines in outputs)
            pytest.fail(f"{what}: not within {timeout} s; what each process said last:\n{tails}")
        time.sleep(0.05)


@pytest.mark.parametrize("how", ["SIGKILL", "SIGINT"])
def test_the_readme_loop_raises_with_jax_accls_message_when_a_peer_goes(how):
    from jax_accl.testing import launch

    # JAX_ACCL_DEBUG=DEBUG: a line per call, so that the peer goes mid-training.
    env = launch.worker_env({"JAX_ACCL_DEBUG": "DEBUG"})
    coordinator = f"127.0.0.1:{launch.free_port()}"
    (survivor, said), (leaver, left) = [_start(i, coordinator, env) for i in range(2)]
    outputs = [("process 0 (stays)", said), ("process 1 (goes)", left)]
    try:
        _until(lambda: sum("psum" in x for x in said) >= 20, "training", outputs)
        leaver.send_signal(getattr(signal, how))
        want = "died: restart the job" if how == "SIGKILL" else "left the job"
        _until(
            lambda: any("JaxRuntimeError" in x and want in x for x in said), "the error", outputs
        )
        if how == "SIGINT":  # both end: neither waits for the other
            _until(
                lambda: survivor.poll() is not None and leaver.poll() is not None,
                "the end",
                outputs,
            )
            assert survivor.returncode == 1 and leaver.returncode != 0
    finally:
        for p in (survivor, leaver):
            if p.poll() is None:
                p.kill()
    text = "".join(said)
    assert "step failed, again from step" not in text, text[-3000:]  # no recover()
    error = [x for x in said if "JaxRuntimeError" in x][0]
    assert "jax_accl" in error and "process 1" in error and "restart the job" in error, error
