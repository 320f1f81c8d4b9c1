"""Launch a multi-process JAX job on this machine: one Python process per rank, each with
its own CPU devices and a shared coordinator for jax.distributed, optionally each inside
a network namespace (a "host", see jax_accl.testing.netns). Used by the tests, the benchmark
(--processes) and the demo (--processes).

A worker receives --process-id, --num-processes, --coordinator and --devices, and
reports by printing one line "RESULT <json>". run_job raises, with every worker's output,
when any worker fails, hangs past the timeout or prints no result."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
# The worker of jax_accl's own multi-process tests (jax_accl.testing.worker): run_job's
# `worker` is this and the scenario's arguments.
WORKER = ["-m", "jax_accl.testing.worker"]


def free_port() -> int:
    return random.randint(20000, 60000)


def worker_env(extra=None) -> dict:
    """The environment of a worker process: CPU only, this checkout importable, no
    XLA_FLAGS (the worker sets its own device count), plus `extra`."""
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": os.pathsep.join(
            [str(PACKAGE_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
    }
    env.pop("XLA_FLAGS", None)
    env.update(extra or {})
    return env


def run_job(
    worker: list[str],
    num_processes: int,
    devices: int,
    *,
    extra=(),
    env=None,
    namespaces=None,
    coordinator_ip="127.0.0.1",
    timeout=300.0,
    killed=(),
    echo: int | None = None,
    on_progress=None,
) -> list[dict]:
    """Runs `python <worker...>` as every process of the job; `env[i]` (optional) adds
    to process i's environment and `namespaces[i]` (optional) is its network namespace.
    Processes in `killed` are expected to die by SIGKILL and return no result. Process
    `echo`'s output is copied to our stdout as it comes (without its RESULT line).
    Process 0's lines "PROGRESS <json>" go to `on_progress(fields)` as they come."""
    coordinator = f"{coordinator_ip}:{free_port()}"
    procs = []
    for i in range(num_processes):
        cmd = [
            sys.executable,
            *worker,
            "--process-id",
            str(i),
            "--num-processes",
            str(num_processes),
            "--coordinator",
            coordinator,
            "--devices",
            str(devices),
            *extra,
        ]
        if namespaces is not None:
            cmd = ["ip", "netns", "exec", namespaces[i], *cmd]
        penv = worker_env(env[i] if env else None)
        procs.append(
            subprocess.Popen(
                cmd, env=penv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd="/"
            )
        )
    echoed: list[str] = []
    watched = echo if echo is not None else (0 if on_progress is not None else None)
    if watched is not None:

        def copy_lines(stream=procs[watched].stdout):
            for line in stream:
                if line.startswith("PROGRESS ") and on_progress is not None and watched == 0:
                    on_progress(json.loads(line[len("PROGRESS ") :]))
                    continue
                echoed.append(line)
                if echo is not None and not line.startswith("RESULT "):
                    print(line, end="", flush=True)

        copier = threading.Thread(target=copy_lines, daemon=True)
        copier.start()
    outputs, failed = [], False
    for i, p in enumerate(procs):
        try:
            if i == watched:
                p.wait(timeout=timeout)
                copier.join(timeout=10)
                out = "".join(echoed)
            else:
                out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            if i == watched:
                p.wait()
                copier.join(timeout=10)
                out = "".join(echoed)
            else:
                out, _ = p.communicate()
            out += f"\n[launcher: process {i} killed after {timeout}s]"
        except BaseException:  # a test's timeout (pytest-timeout), ^C: no process outlives it
            for q in procs:
                q.kill()
                q.wait()
            raise
        outputs.append(out)
        failed |= p.returncode != (-9 if i in killed else 0)
    results = []
    for i, out in enumerate(outputs):
        if i in killed:
            continue
        lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
        if not lines:
            failed = True
            continue
        results.append(json.loads(lines[-1][len("RESULT ") :]))
    if failed:
        report = "\n".join(
            f"--- process {i} (exit {p.returncode}) ---\n{out[-4000:]}"
            for i, (p, out) in enumerate(zip(procs, outputs))
        )
        raise RuntimeError(f"multi-process job {' '.join(worker)} failed:\n{report}")
    return results


def join_job(
    devices: int, coordinator: str, num_processes: int, process_id: int, gloo_interface=""
):
    """What a process that run_job launched does first: `devices` CPU devices, jax.lax's
    collectives over gloo (bound to `gloo_interface` on namespaced hosts), and
    jax.distributed joined."""
    import jax

    jax.config.update("jax_num_cpu_devices", devices)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=coordinator, num_processes=num_processes, process_id=process_id
    )
    if gloo_interface:
        from jax_accl import _compat

        _compat.use_gloo_on_interface(gloo_interface)
