"""Runs JAX's own multi-process tests (tests/multiprocess/ of the jax repository at the
installed jax's tag) through jax's helper, over gloo or on jax_accl, and prints what
passed, what failed and the MPI calls jax_accl carried (docs/xla_collectives.md, "JAX's
own multi-process tests").

    python scripts/jax_suite/run.py --tests DIR --processes 2 --devices 4 --accl 1 \
        all_reduce_test.py all_gather_test.py ...

Each file runs as ``python FILE --num_processes=N`` with JAX_NUM_CPU_DEVICES=D in the
environment (jax's helper re-executes its workers with both). ``--accl 1`` sets only
JAX_ACCL_XLA_COLLECTIVES=1; ``--accl 0`` sets it to 0 (gloo). The workers' unittest
reports are read from their logs; this directory's sitecustomize.py, on the workers'
PYTHONPATH, writes each one's jax_accl.stats()["xla_collectives"] calls at exit.
Prints one JSON object per file on a line ``SUITE <json>``."""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def worker_report(text: str) -> dict:
    """A unittest report's counts and the names of the tests that failed or erred."""
    ran = re.findall(r"^Ran (\d+) tests?", text, re.M)
    end = re.findall(r"^(OK|FAILED)(?: \((.*)\))?$", text, re.M)
    counts = {"ran": int(ran[-1]) if ran else 0, "failures": 0, "errors": 0, "skipped": 0}
    if end:
        for part in (end[-1][1] or "").split(","):
            name, _, value = part.strip().partition("=")
            if name in counts or name == "expected failures":
                counts[name] = int(value)
    counts["failed"] = sorted(set(re.findall(r"^\[  FAILED  \] (.+?)\s*$", text, re.M)))
    counts["complete"] = bool(end)
    return counts


def run_file(path: Path, processes: int, devices: int, accl: bool, timeout: float) -> dict:
    out = Path(tempfile.mkdtemp(prefix="jax_suite_"))
    env = dict(os.environ)
    env["JAX_ACCL_XLA_COLLECTIVES"] = "1" if accl else "0"
    env["JAX_NUM_CPU_DEVICES"] = str(devices)  # (the absl flag alone leaves 1)
    env["TEST_UNDECLARED_OUTPUTS_DIR"] = str(out)
    env["JAX_SUITE_STATS_DIR"] = str(out)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(HERE), env.get("PYTHONPATH", "")] if p)
    command = [
        sys.executable,
        str(path),
        f"--num_processes={processes}",
    ]
    proc = subprocess.Popen(
        command,
        env=env,
        cwd=path.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        timed_out = True
    workers = [
        worker_report((out / f"jax_{i}_stderr.log").read_text(errors="replace"))
        if (out / f"jax_{i}_stderr.log").exists()
        else {"ran": 0, "failed": [], "complete": False}
        for i in range(processes)
    ]
    calls: collections.Counter = collections.Counter()
    for stats in out.glob("stats-*.json"):
        calls.update({k: v for k, v in json.loads(stats.read_text()).items() if k != "error"})
    first = workers[0]
    return {
        "file": path.name,
        "accl": accl,
        "processes": processes,
        "devices": devices,
        "returncode": proc.returncode,
        "timed_out": timed_out,
        "ran": first["ran"],
        "skipped": first.get("skipped", 0),
        "failed": sorted({name for w in workers for name in w["failed"]}),
        "complete": all(w["complete"] for w in workers),
        "calls": dict(sorted(calls.items())),
        "logs": str(out),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=Path, required=True, help="jax's tests/multiprocess")
    parser.add_argument("--processes", type=int, required=True)
    parser.add_argument("--devices", type=int, default=1, help="CPU devices per process")
    parser.add_argument("--accl", type=int, choices=[0, 1], required=True)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    for name in args.files:
        result = run_file(
            args.tests / name, args.processes, args.devices, bool(args.accl), args.timeout
        )
        print("SUITE " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
