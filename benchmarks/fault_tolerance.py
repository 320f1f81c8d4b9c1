"""Kill and restart one process of examples/fault_tolerant.py over and over, and measure.

4 processes x 1 CPU device on this host train with JAX's fault-tolerance API on
jax_accl. Each cycle SIGKILLs one process (1, 2, 3 in turn; process 0 runs the
coordinator), waits for the survivors' first step on the other devices, starts it again
and waits for the first step on all 4. Prints per cycle: seconds from the kill to the
survivors' first step, from the restart to the first step on all (and from the new
process's jax.distributed.initialize to it), the file descriptors and resident memory of
the processes that stayed, and whether every step's weights were equal bytes on every
process that ran it.

    python benchmarks/fault_tolerance.py --cycles 20 [--path jit] [--heartbeat 5]
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from jax_accl.testing import launch

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "fault_tolerant.py"
PROCESSES = 4


class Process:
    """One process of the job: its output's lines with the time each came."""

    def __init__(self, i, args, coordinator, env):
        cmd = [sys.executable, "-u", str(EXAMPLE), "--coordinator", coordinator]
        cmd += ["--num-processes", str(PROCESSES), "--process-id", str(i), "--path", args.path]
        cmd += ["--steps", "1000000", "--heartbeat", str(args.heartbeat), "--pause", "0.2"]
        self.proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd="/"
        )
        self.lines = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line.rstrip()))

    def reports(self, since=0.0):
        return [(t, json.loads(x)) for t, x in list(self.lines) if x.startswith("{") and t >= since]

    def first(self, since, devices):
        return next((t for t, r in self.reports(since) if r["devices"] == devices), None)

    def resources(self):
        pid = self.proc.pid
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        rss = [x for x in open(f"/proc/{pid}/status") if x.startswith("VmRSS")][0].split()[1]
        return fds, int(rss) // 1024


def wait(condition, timeout=300):
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise SystemExit(f"not within {timeout} s")
        time.sleep(0.05)


def equal_weights(processes):
    """Whether every (step, devices) was reported with the same weights everywhere."""
    seen = {}
    for p in processes:
        for _, r in p.reports():
            seen.setdefault((r["step"], r["devices"]), set()).add(r["weights"])
    return all(len(w) == 1 for w in seen.values()), len(seen)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--path", choices=("shard_map", "jit"), default="shard_map")
    parser.add_argument("--heartbeat", type=int, default=5)
    return parser.parse_args(argv)


def main():
    args = parse_args()
    env = launch.worker_env({"JAX_ACCL_TIMEOUT_S": "30"})
    if args.path == "jit":
        env["JAX_ACCL_XLA_COLLECTIVES"] = "1"
    coordinator = f"127.0.0.1:{launch.free_port()}"
    procs = [Process(i, args, coordinator, env) for i in range(PROCESSES)]
    gone = []
    try:
        wait(lambda: all(len(p.reports()) >= 3 for p in procs))
        print(
            "cycle victim kill->survivors_step_s restart->all_step_s initialize->all_step_s "
            "fds(stayed) rss_mib(stayed) weights_equal load",
            flush=True,
        )
        for cycle in range(1, args.cycles + 1):
            victim = 1 + (cycle - 1) % (PROCESSES - 1)
            stayed = [p for i, p in enumerate(procs) if i != victim]
            killed = time.monotonic()
            procs[victim].proc.send_signal(signal.SIGKILL)
            gone.append(procs[victim])
            wait(lambda k=killed, s=stayed: all(p.first(k, PROCESSES - 1) for p in s))
            to_survivors = max(p.first(killed, PROCESSES - 1) for p in stayed) - killed
            restarted = time.monotonic()
            procs[victim] = Process(victim, args, coordinator, env)
            wait(lambda r=restarted: all(p.first(r, PROCESSES) for p in procs))
            back = max(p.first(restarted, PROCESSES) for p in procs)
            joined = next(t for t, x in procs[victim].lines if "joined jax.distributed" in x)
            resources = [p.resources() for p in stayed]
            ok, steps = equal_weights(procs + gone)
            print(
                f"{cycle} {victim} {to_survivors:.2f} {back - restarted:.2f} {back - joined:.2f} "
                f"{[r[0] for r in resources]} {[r[1] for r in resources]} {ok} ({steps} steps) "
                f"{os.getloadavg()[0]:.1f}",
                flush=True,
            )
    finally:
        for p in procs:
            if p.proc.poll() is None:
                p.proc.kill()


if __name__ == "__main__":
    main()
