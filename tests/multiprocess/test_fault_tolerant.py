"""examples/fault_tolerant.py, JAX's fault-tolerance API (jax_enable_recoverability,
live_devices) on jax_accl, 4 processes x 1 CPU device on one host, on both of jax_accl's
paths (jax_accl.shard_map; plain jax.jit with JAX_ACCL_XLA_COLLECTIVES=1): process 3 is
SIGKILLed mid-training; the survivors' step raises, live_devices drops it and they train
on 3 devices; it is started again under its process id, joins, takes the weights and the
step from process 0, and all 4 train on; every step's weights are equal on every process
that ran it, and jax_accl carried the collectives (its call counts).

The survivors wait between steps (a file the test holds) from their first step on 3
devices until the process started again is about to join, so that the order of events is
the test's, not the machine's load. This file is also the job's worker (run by path)."""

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

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fault_tolerant.py"
PROCESSES, KILLED, STEPS, KILL_AFTER = 4, 3, 10, 3
HEARTBEAT_S = 5  # jax.distributed's: how soon live_devices drops the dead process


def _start(i, coordinator, path, hold, env):
    cmd = [sys.executable, "-u", str(Path(__file__).resolve()), "--coordinator", coordinator]
    cmd += ["--num-processes", str(PROCESSES), "--process-id", str(i), "--path", path]
    cmd += ["--steps", str(STEPS), "--heartbeat", str(HEARTBEAT_S), "--pause", "0.2"]
    proc = subprocess.Popen(
        cmd,
        env={**env, "HOLD_FILE": hold},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd="/",
    )
    lines = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    return proc, lines


def _reports(lines):
    return [json.loads(x) for x in list(lines) if x.startswith("{")]


def _wait(condition, what, procs, timeout=240):
    end = time.monotonic() + timeout  # a guard against a hang, not a measurement
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.05)


@pytest.mark.parametrize("path", ["shard_map", "jit"])
def test_a_killed_process_is_trained_around_and_rejoins(path, tmp_path):
    from jax_accl.testing import launch

    env = launch.worker_env({"JAX_ACCL_TIMEOUT_S": "30"})
    if path == "jit":
        env["JAX_ACCL_XLA_COLLECTIVES"] = "1"
    coordinator = f"127.0.0.1:{launch.free_port()}"
    hold = str(tmp_path / "hold")
    runs = [_start(i, coordinator, path, hold, env) for i in range(PROCESSES)]
    procs = [p for p, _ in runs]
    try:
        _wait(lambda: all(len(_reports(ls)) >= KILL_AFTER for _, ls in runs), "training", procs)
        Path(hold).touch()  # the survivors wait after their first step on 3 devices
        runs[KILLED][0].send_signal(signal.SIGKILL)
        survivors = [runs[i][1] for i in range(PROCESSES) if i != KILLED]
        _wait(
            lambda: all(any(r["devices"] == 3 for r in _reports(ls)) for ls in survivors),
            "a step on the 3 survivors",
            procs,
        )
        runs.append(_start(KILLED, coordinator, path, hold, env))
        procs.append(runs[-1][0])
        _wait(lambda: any("joining" in x for x in runs[-1][1]), "the restart", procs)
        os.remove(hold)
        notes = launch.wait_for(
            [procs[i] for i in range(PROCESSES) if i != KILLED] + procs[-1:], 240
        )
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    outputs = ["".join(ls) for _, ls in runs]
    everything = "\n".join(f"--- {i}\n{o[-3000:]}" for i, o in enumerate(outputs)) + str(notes)
    assert procs[KILLED].returncode == -signal.SIGKILL
    for i in [i for i in range(PROCESSES) if i != KILLED] + [PROCESSES]:
        assert procs[i].returncode == 0, everything
    weights_at = {}
    for i in [i for i in range(PROCESSES) if i != KILLED] + [PROCESSES]:
        reports = _reports(runs[i][1])
        kinds = [r["devices"] for r in reports]
        if i != PROCESSES:  # a survivor: 4 devices, then 3, then 4 again; a failed step
            assert kinds[0] == 4 and 3 in kinds and kinds[-1] == 4, (i, kinds)
            assert re.search(r"step \d+ failed", outputs[i]), outputs[i][-3000:]
        else:  # the process started again joined at the survivors' step, not at 0
            assert reports[0]["step"] > KILL_AFTER and set(kinds) == {4}, reports
        assert [r["step"] for r in reports] == list(range(reports[0]["step"], STEPS))
        for r in reports:
            weights_at.setdefault((r["step"], r["devices"]), set()).add(r["weights"])
        calls = json.loads(re.search(r"calls (\{.*\})", outputs[i]).group(1))
        if path == "shard_map":
            assert calls["jax_accl"]["all-reduce"] > 0, calls
        else:
            assert calls["xla_on_jax_accl"].get("MPI_Allreduce", 0) > 0, calls
    for key, weights in weights_at.items():
        assert len(weights) == 1, (key, weights)  # one model: equal bytes everywhere
    last = _reports(runs[PROCESSES][1])[-1]
    assert last["loss"] < _reports(runs[0][1])[0]["loss"]


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
        if any(d["devices"] < args.num_processes for d in fewer):
            while os.path.exists(hold):
                time.sleep(0.05)

    original = print

    def noting_print(*a, **k):
        if a and isinstance(a[0], str) and a[0].startswith("{"):
            fewer.append(json.loads(a[0]))
        original(*a, **k)

    example.print = noting_print
    print("joining", flush=True)
    example.train(args, example.make_step(args.path), between_steps)
    print(f"process {args.process_id}: calls {json.dumps(example.calls_made())}", flush=True)
    example.jax.distributed.shutdown()


if __name__ == "__main__":
    _worker()
