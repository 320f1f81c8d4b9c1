"""A launcher that re-executes its workers as jax's own test_multiprocess does:
``/proc/self/exe plain_jit.py ...`` with its environment and its sys.path as PYTHONPATH,
so no worker imports what the launcher imported (and, from a virtual environment, each
runs the base interpreter, whose site does not read the environment's .pth files).
Run as ``python reexec_launcher.py N [plain_jit.py's --init ...]``; prints each
worker's RESULT line, or the output of one that failed, and exits 1 then."""

import os
import socket
import subprocess
import sys
from pathlib import Path

n, extra = int(sys.argv[1]), sys.argv[2:]
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
script = Path(__file__).with_name("plain_jit.py")
workers = [
    subprocess.Popen(
        ["/proc/self/exe", str(script), "--coordinator", f"127.0.0.1:{port}"]
        + ["--num-processes", str(n), "--process-id", str(i), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    for i in range(n)
]
failed = False
for i, worker in enumerate(workers):
    try:
        out, _ = worker.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        worker.kill()
        out, _ = worker.communicate()
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    if worker.returncode != 0 or not lines:
        failed = True
        print(f"--- worker {i} (exit {worker.returncode}) ---\n{out[-3000:]}")
    else:
        print(lines[-1])
sys.exit(1 if failed else 0)
