"""examples/fault_tolerant.py, JAX's fault-tolerance API (jax_enable_recoverability,
live_devices) on jax_accl, 4 processes x 1 CPU device on one host, on both of jax_accl's
paths (jax_accl.shard_map; plain jax.jit with JAX_ACCL_XLA_COLLECTIVES=1): process 3 is
SIGKILLed mid-training; the survivors' step raises, live_devices drops it and they train
on 3 devices; it is started again under its process id, joins, takes the weights and the
step from process 0, and all 4 train on; every step's weights are equal on every process
that ran it, and jax_accl carried the collectives (its call counts). The same with a whole
host lost and back: 2 namespaced hosts x 2 processes x 2 devices, both processes of host
1 killed and started again (jax_accl.shard_map).

The survivors wait between steps (a file the test holds) from their first step on 3
devices until the process started again is about to join, so that the order of events is
the test's, not the machine's load. The process started again notes what it was sent,
which must be process 0's weights: JAX's example sends them by a psum of an input typed
replicated whose buffers differ, and so does examples/fault_tolerant.py. This file is
also the job's worker (run by path)."""

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from jax_accl.testing import launch, netns

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fault_tolerant.py"
PROCESSES, KILLED, STEPS, KILL_AFTER = 4, 3, 10, 3
HEARTBEAT_S = 5  # jax.distributed's: how soon live_devices drops the dead process


def _start(i, job, namespace=None):
    cmd = ["ip", "netns", "exec", namespace] if namespace else []
    cmd += [sys.executable, "-u", str(Path(__file__).resolve()), "--coordinator", job["at"]]
    cmd += ["--num-processes", str(PROCESSES), "--process-id", str(i), "--path", job["path"]]
    cmd += ["--steps", str(STEPS), "--heartbeat", str(HEARTBEAT_S), "--pause", "0.2"]
    cmd += ["--devices", str(job["devices"])]
    env = dict(job["env"], HOLD_FILE=job["hold"])
    if namespace:
        env.update(JAX_ACCL_RAILS="rail0", JAX_ACCL_HOST_ID=namespace)
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd="/"
    )
    lines = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    return proc, lines


def _reports(lines):
    return [json.loads(x) for x in list(lines) if x.startswith("{")]


def _received(lines):
    """What a process that came back was sent (its worker's "received" lines)."""
    return [json.loads(x.split(" ", 1)[1]) for x in list(lines) if x.startswith("received ")]


def _wait(condition, what, timeout=240):
    end = time.monotonic() + timeout  # a guard against a hang, not a measurement
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.05)


def _kill_and_rejoin(job, victims, namespaces):
    """Runs the job, kills `victims` after step KILL_AFTER, starts them again once the
    survivors stepped without them, and checks what the module's docstring says."""
    runs = [_start(i, job, namespaces[i]) for i in range(PROCESSES)]
    procs = [p for p, _ in runs]
    every = PROCESSES * job["devices"]
    fewer = every - len(victims) * job["devices"]
    stayed = [i for i in range(PROCESSES) if i not in victims]
    try:
        _wait(lambda: all(len(_reports(ls)) >= KILL_AFTER for _, ls in runs), "training")
        Path(job["hold"]).touch()  # the survivors wait after their first step without them
        for v in victims:
            procs[v].send_signal(signal.SIGKILL)
        _wait(
            lambda: all(any(r["devices"] == fewer for r in _reports(runs[i][1])) for i in stayed),
            "a step of the survivors",
        )
        for v in victims:
            runs.append(_start(v, job, namespaces[v]))
            procs.append(runs[-1][0])
        back = list(range(PROCESSES, PROCESSES + len(victims)))
        _wait(lambda: all(any("joining" in x for x in runs[b][1]) for b in back), "the restart")
        os.remove(job["hold"])
        notes = launch.wait_for([procs[i] for i in stayed + back], 240)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    outputs = ["".join(ls) for _, ls in runs]
    everything = "\n".join(f"--- {i}\n{o[-3000:]}" for i, o in enumerate(outputs)) + str(notes)
    for v in victims:
        assert procs[v].returncode == -signal.SIGKILL
    weights_at = {}
    for i in stayed + back:
        assert procs[i].returncode == 0, everything
        reports = _reports(runs[i][1])
        kinds = [r["devices"] for r in reports]
        if i in stayed:  # all devices, then fewer, then all again; a failed step
            assert kinds[0] == every and fewer in kinds and kinds[-1] == every, (i, kinds)
            assert re.search(r"step \d+ failed", outputs[i]), outputs[i][-3000:]
        else:  # a process started again joined at the survivors' step, not at 0
            assert reports[0]["step"] > KILL_AFTER and min(kinds) > fewer, reports
            assert kinds[-1] == every, kinds
            # It was sent process 0's step and weights (JAX's way: a psum of an input
            # typed replicated whose buffers differ, on both paths).
            (got,) = _received(runs[i][1])
            assert got["step"] == reports[0]["step"], (got, reports[0])
            sent = [r for r in _reports(runs[0][1]) if r["step"] == got["step"] - 1]
            assert sent and got["weights"] == sent[-1]["weights"], (got, sent)
        assert [r["step"] for r in reports] == list(range(reports[0]["step"], STEPS))
        for r in reports:
            weights_at.setdefault((r["step"], r["devices"]), set()).add(r["weights"])
        calls = json.loads(re.search(r"calls (\{.*\})", outputs[i]).group(1))
        if job["path"] == "shard_map":
            assert calls["jax_accl"]["all-reduce"] > 0, calls
        else:
            assert calls["xla_on_jax_accl"].get("MPI_Allreduce", 0) > 0, calls
    for key, weights in weights_at.items():
        assert len(weights) == 1, (key, weights)  # one model: equal bytes everywhere
    assert _reports(runs[-1][1])[-1]["loss"] < _reports(runs[0][1])[0]["loss"]


def _job(path, tmp_path, coordinator, devices):
    env = launch.worker_env({"JAX_ACCL_TIMEOUT_S": "30"})
    if path == "jit":
        env["JAX_ACCL_XLA_COLLECTIVES"] = "1"
    hold = str(tmp_path / "hold")
    return {"at": coordinator, "path": path, "devices": devices, "env": env, "hold": hold}


@pytest.mark.parametrize("path", ["shard_map", "jit"])
def test_a_killed_process_is_trained_around_and_rejoins(path, tmp_path):
    job = _job(path, tmp_path, f"127.0.0.1:{launch.free_port()}", devices=1)
    _kill_and_rejoin(job, [KILLED], [None] * PROCESSES)


def test_a_whole_host_is_trained_around_and_rejoins(root_required, tmp_path):
    """2 namespaced hosts x 2 processes x 2 devices, jax_accl.shard_map: host 1's two
    processes killed and started again."""
    with netns.virtual_hosts(2, 1) as names:
        ip = netns.rail_ip(0, 0)
        job = _job("shard_map", tmp_path, f"{ip}:{launch.free_port(ip)}", devices=2)
        _kill_and_rejoin(job, [2, 3], [names[0], names[0], names[1], names[1]])


def _worker():
    spec = importlib.util.spec_from_file_location("fault_tolerant", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    args = example.parse_args(sys.argv[1:])
    example.join(args)
    hold = os.environ["HOLD_FILE"]
    fewer = []

    def between_steps(step):
        # After a step on fewer devices than the job's, wait while the test holds.
        if any(d["devices"] < args.num_processes * args.devices for d in fewer):
            while os.path.exists(hold):
                time.sleep(0.05)

    original = print

    def noting_print(*a, **k):
        if a and isinstance(a[0], str) and a[0].startswith("{"):
            fewer.append(json.loads(a[0]))
        original(*a, **k)

    example.print = noting_print
    catch_up = example.catch_up

    def noting_catch_up(step, weights, devices, path):
        # What this process was sent, if it was behind (it came back).
        new_step, new_weights = catch_up(step, weights, devices, path)
        if new_step != step:
            got = {"step": new_step, "weights": np.asarray(new_weights).tobytes().hex()}
            print("received " + json.dumps(got), flush=True)
        return new_step, new_weights

    example.catch_up = noting_catch_up
    print("joining", flush=True)
    example.train(args, example.make_step(args.path), between_steps)
    print(f"process {args.process_id}: calls {json.dumps(example.calls_made())}", flush=True)
    example.jax.distributed.shutdown()


if __name__ == "__main__":
    _worker()
