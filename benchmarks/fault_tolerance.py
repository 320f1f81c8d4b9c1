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
    python benchmarks/fault_tolerance.py --hosts 2 --devices 2 --cycles 3

--hosts 2 runs the 4 processes on 2 namespaced hosts (root), 2 on each, one rail, and
each cycle kills host 1 whole (processes 2 and 3) and starts both again.
"""

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from jax_accl.testing import launch, netns

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "fault_tolerant.py"
PROCESSES = 4


class Process:
    """One process of the job: its output's lines with the time each came."""

    def __init__(self, i, args, coordinator, env, namespace=None):
        cmd = ["ip", "netns", "exec", namespace] if namespace else []
        cmd += [sys.executable, "-u", str(EXAMPLE), "--coordinator", coordinator]
        cmd += ["--num-processes", str(PROCESSES), "--process-id", str(i), "--path", args.path]
        cmd += ["--devices", str(args.devices)]
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
    parser.add_argument("--devices", type=int, default=1, help="CPU devices per process")
    parser.add_argument(
        "--hosts",
        type=int,
        choices=(1, 2),
        default=1,
        help="2: namespaced hosts of 2 processes each (root); a cycle kills host 1 whole",
    )
    return parser.parse_args(argv)


def main():
    args = parse_args()
    with contextlib.ExitStack() as stack:
        if args.hosts == 2:
            names = stack.enter_context(netns.virtual_hosts(2, 1))
            ip = netns.rail_ip(0, 0)
            coordinator = f"{ip}:{launch.free_port(ip)}"
        else:
            names, coordinator = [None], f"127.0.0.1:{launch.free_port()}"
        cycles(args, coordinator, names)


def cycles(args, coordinator, names):
    host_of = [0, 0, 1, 1] if args.hosts == 2 else [0] * PROCESSES
    env = {"JAX_ACCL_TIMEOUT_S": "30"}
    if args.path == "jit":
        env["JAX_ACCL_XLA_COLLECTIVES"] = "1"

    def start(i):
        own = {"JAX_ACCL_RAILS": "rail0", "JAX_ACCL_HOST_ID": names[host_of[i]]} if names[0] else {}
        return Process(i, args, coordinator, launch.worker_env({**env, **own}), names[host_of[i]])

    procs = [start(i) for i in range(PROCESSES)]
    everything = PROCESSES * args.devices
    gone = []
    try:
        wait(lambda: all(len(p.reports()) >= 3 for p in procs))
        print(
            "cycle killed kill->survivors_step_s restart->all_step_s initialize->all_step_s "
            "fds(stayed) rss_mib(stayed) weights_equal load",
            flush=True,
        )
        for cycle in range(1, args.cycles + 1):
            victims = [2, 3] if args.hosts == 2 else [1 + (cycle - 1) % (PROCESSES - 1)]
            stayed = [p for i, p in enumerate(procs) if i not in victims]
            fewer = everything - len(victims) * args.devices
            killed = time.monotonic()
            for v in victims:
                procs[v].proc.send_signal(signal.SIGKILL)
                gone.append(procs[v])
            wait(lambda k=killed, s=stayed, n=fewer: all(p.first(k, n) for p in s))
            to_survivors = max(p.first(killed, fewer) for p in stayed) - killed
            restarted = time.monotonic()
            for v in victims:
                procs[v] = start(v)
            wait(lambda r=restarted: all(p.first(r, everything) for p in procs))
            back = max(p.first(restarted, everything) for p in procs)
            joined = max(
                next(t for t, x in procs[v].lines if "joined jax.distributed" in x) for v in victims
            )
            resources = [p.resources() for p in stayed]
            ok, steps = equal_weights(procs + gone)
            print(
                f"{cycle} {victims} {to_survivors:.2f} {back - restarted:.2f} {back - joined:.2f} "
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
