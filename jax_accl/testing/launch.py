"""Launch a multi-process JAX job on this machine: one Python process per rank, each with
its own CPU devices and a shared coordinator for jax.distributed, optionally each inside
a network namespace (a "host", see jax_accl.testing.netns). Used by the tests, the benchmark
(--processes) and the demo (--processes).

A worker receives --process-id, --num-processes, --coordinator and --devices, and
reports by printing one line "RESULT <json>". run_job raises, with every worker's output,
when any worker fails, hangs past the timeout or prints no result."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
# The worker of jax_accl's own multi-process tests (jax_accl.testing.worker): run_job's
# `worker` is this and the scenario's arguments.
WORKER = ["-m", "jax_accl.testing.worker"]


# How long the other processes of a job may go on once one has failed (to report what
# they saw) before the launcher ends them: a worker whose coordinator died waits for it
# until jax.distributed's initialization timeout (300 s by default) otherwise.
FAILED_PEER_GRACE_S = 30.0


# The signals that end a launcher without Ctrl-C: a scheduler's kill, a closed terminal.
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def ended_by_signals():
    """While the block runs (a launcher's main thread), ENDING_SIGNALS end the launcher as
    Ctrl-C does, by an exception: wait_for kills the workers and the context managers
    remove what they made (network namespaces), where the signal's default would end the
    launcher alone and leave both behind. Later ones are ignored while that cleans up."""

    def end(signum, _frame):
        for s in ENDING_SIGNALS:
            signal.signal(s, signal.SIG_IGN)
        name = signal.Signals(signum).name
        print(f"launcher: {name}: ending the job's processes", file=sys.stderr, flush=True)
        raise SystemExit(128 + signum)

    before = {s: signal.signal(s, end) for s in ENDING_SIGNALS}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def free_port(host: str = "127.0.0.1") -> int:
    """A port for the job's coordinator: below the kernel's ephemeral range (where no
    outgoing connection or port-0 listener takes one behind our back) and free now. gRPC
    binds with SO_REUSEPORT, so a port another coordinator holds would be shared, and a
    port held otherwise makes process 0 die at start-up while the rest wait for it.
    Checked here, in the launcher's network namespace: a namespaced host's is fresh."""
    low, high = ephemeral_range()
    # Below the range where there is room (the usual 32768), else above it, else anywhere.
    first, last = (20000, low - 1) if low > 21000 else (high + 1, 65535)
    if last - first < 1000:
        first, last = 1024, 65535
    for _ in range(200):
        port = random.randint(first, last)
        with socket.socket() as probe:
            try:
                probe.bind((host if host == "127.0.0.1" else "", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {first}..{last} for the job's coordinator")


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range of ports for outgoing connections and port-0 listeners."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[:2]
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


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
    prefixes=None,
    coordinator_ip="127.0.0.1",
    timeout=300.0,
    killed=(),
    echo: int | None = None,
    on_progress=None,
) -> list[dict]:
    """Runs `python <worker...>` as every process of the job; `env[i]` (optional) adds
    to process i's environment, `namespaces[i]` (optional) is its network namespace and
    `prefixes[i]` (optional) a command that starts it (e.g. ["unshare", "--pid", "--fork"]).
    Processes in `killed` are expected to die by SIGKILL and return no result. Process
    `echo`'s output is copied to our stdout as it comes (without its RESULT line).
    Process 0's lines "PROGRESS <json>" go to `on_progress(fields)` as they come.
    Once a process fails the others have FAILED_PEER_GRACE_S to end before they are
    killed."""
    coordinator = f"{coordinator_ip}:{free_port(coordinator_ip)}"
    procs = []
    try:
        _spawn(procs, worker, num_processes, devices, coordinator, extra, env, namespaces, prefixes)
        return _collect(procs, worker, timeout, killed, echo, on_progress)
    except BaseException:  # a signal (SystemExit) while starting them: none outlives us
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        raise


def _spawn(procs, worker, num_processes, devices, coordinator, extra, env, namespaces, prefixes):
    """Starts the job's processes, each appended to `procs` as it starts."""
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
        if prefixes is not None:
            cmd = [*prefixes[i], *cmd]
        if namespaces is not None:
            cmd = ["ip", "netns", "exec", namespaces[i], *cmd]
        penv = worker_env(env[i] if env else None)
        procs.append(
            subprocess.Popen(
                cmd, env=penv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd="/"
            )
        )


def _collect(procs, worker, timeout, killed, echo, on_progress) -> list[dict]:
    """Reads every process's output until the job ends (wait_for); its results, or
    RuntimeError with every process's output."""
    outputs = [[] for _ in procs]

    def collect(i, stream):
        for line in stream:
            if i == 0 and on_progress is not None and line.startswith("PROGRESS "):
                on_progress(json.loads(line[len("PROGRESS ") :]))
                continue
            outputs[i].append(line)
            if i == echo and not line.startswith("RESULT "):
                print(line, end="", flush=True)

    readers = [
        threading.Thread(target=collect, args=(i, p.stdout), daemon=True)
        for i, p in enumerate(procs)
    ]
    for reader in readers:
        reader.start()
    notes = wait_for(procs, timeout, killed)
    for reader in readers:
        reader.join(timeout=10)
    outputs = ["".join(lines) + notes.get(i, "") for i, lines in enumerate(outputs)]
    failed = any(p.returncode != (-9 if i in killed else 0) for i, p in enumerate(procs))
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


def wait_for(procs, timeout: float, killed=()) -> dict[int, str]:
    """Waits for every process of the job, up to `timeout`; once one fails unexpectedly
    the rest get FAILED_PEER_GRACE_S more. Kills what is left then (and on an interrupt,
    e.g. a test's timeout, at once: no process outlives the launcher). Returns a note for
    each process it killed."""
    deadline = time.monotonic() + timeout
    reason = f"after {timeout}s"
    notes: dict[int, str] = {}
    try:
        while any(p.poll() is None for p in procs):
            failed = [
                i for i, p in enumerate(procs) if p.poll() not in (None, 0) and i not in killed
            ]
            if failed and deadline > time.monotonic() + FAILED_PEER_GRACE_S:
                deadline = time.monotonic() + FAILED_PEER_GRACE_S
                reason = f"process {failed[0]} failed (exit {procs[failed[0]].returncode})"
            if time.monotonic() > deadline:
                for i, p in enumerate(procs):
                    if p.poll() is None:
                        p.kill()
                        p.wait()
                        notes[i] = f"\n[launcher: process {i} killed: {reason}]"
                break
            time.sleep(0.05)
    except BaseException:
        for p in procs:
            p.kill()
            p.wait()
        raise
    return notes


def run_on_namespaced_hosts(worker, spaces, devices, rails: str, *, extra=(), env=None, **kw):
    """run_job with process i in network namespace spaces[i] (a host netns.virtual_hosts
    made): told its host and its rails (`rails`, comma-separated), jax.lax's gloo bound
    to rail0, the coordinator on the first host's rail0. `env[i]` adds to process i's
    environment; the rest of run_job's options pass through."""
    from jax_accl.testing import netns

    env = [
        {"JAX_ACCL_HOST_ID": ns, "JAX_ACCL_RAILS": rails, **(env[i] if env else {})}
        for i, ns in enumerate(spaces)
    ]
    return run_job(
        worker,
        len(spaces),
        devices,
        extra=[*extra, "--gloo-interface", "rail0"],
        env=env,
        namespaces=spaces,
        coordinator_ip=netns.rail_ip(0, 0),
        **kw,
    )


def join_job(
    devices: int,
    coordinator: str,
    num_processes: int,
    process_id: int,
    gloo_interface="",
    initialization_timeout: int | None = None,
):
    """What a process that run_job launched does first: `devices` CPU devices, jax.lax's
    collectives over gloo (bound to `gloo_interface` on namespaced hosts) unless jax_accl
    is XLA's collectives backend here (JAX_ACCL_XLA_COLLECTIVES=1), and jax.distributed
    joined."""
    import jax

    from jax_accl import xla_collectives

    jax.config.update("jax_num_cpu_devices", devices)
    on_gloo = not xla_collectives.enabled()
    if on_gloo:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    timeout = (
        {} if initialization_timeout is None else {"initialization_timeout": initialization_timeout}
    )
    jax.distributed.initialize(
        coordinator_address=coordinator,
        num_processes=num_processes,
        process_id=process_id,
        **timeout,
    )
    if gloo_interface and on_gloo:
        from jax_accl import _compat

        _compat.use_gloo_on_interface(gloo_interface)


def worker_devices(args) -> list:
    """A tool's worker (its parsed `args`: devices, and the job's hidden flags): joins
    the job when it is one of several processes (join_job), else takes `args.devices`
    CPU devices; every device of the job, ordered by process then id."""
    import jax

    if args.num_processes > 1:
        join_job(
            args.devices, args.coordinator, args.num_processes, args.process_id, args.gloo_interface
        )
    else:
        jax.config.update("jax_num_cpu_devices", args.devices)
    return sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
