"""`python -m jax_accl.bench --profiler-cost`: what jax_accl's profiler plugin costs a
small all-reduce. A 4 KiB all-reduce over the devices, per op (K and 2K chained in a
fori_loop, as the sweep times it), in three states of one process: before any profiling
session, after one has run (recording is off again: it should cost nothing) and inside
a session (every call and phase recorded). Each is timed in fresh processes, alternately
with jax_accl's plugin registered and, as the control, without it (XLA's profiler
alone), so that what a session leaves behind in JAX itself is told apart from what
jax_accl adds."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile

import jax

import jax_accl
from jax_accl.bench.sweep import BenchRows, chained, mesh_of, sharded_rows
from jax_accl.bench.timing import call_seconds, chain_length

SIZE = 4 << 10
PROCESSES = 3  # of each kind

# One measuring process: KIND DEVICES LOOP REPS. The control keeps XLA from learning of
# jax_accl's plugin, before jax_accl is imported (importing any of jax_accl registers it).
CHILD = """
import json, sys
kind, devices, loop, reps = sys.argv[1], *(int(a) for a in sys.argv[2:5])
if kind == "control":
    from jax._src.lib import _profiler
    _profiler.register_plugin_profiler = lambda capsule: None
from jax_accl.bench.profiler_cost import measure
print(json.dumps(measure(devices, loop, reps)))
"""


def measure(devices: int, loop: int, reps: int) -> dict:
    """This process's medians, in seconds per op: before, inside and after a session."""
    jax.config.update("jax_num_cpu_devices", devices)
    mesh = mesh_of(devices)
    x = sharded_rows(mesh, BenchRows(SIZE, devices))
    loop = chain_length(SIZE, loop, devices)

    def mean(v):
        return jax_accl.psum(v, "i") / devices

    short, long = chained(mesh, mean, loop), chained(mesh, mean, 2 * loop)

    def per_op() -> float:
        return statistics.median(
            (call_seconds(long, x) - call_seconds(short, x)) / loop for _ in range(reps)
        )

    for _ in range(200):  # warm up: the first calls of a process are slower
        call_seconds(short, x), call_seconds(long, x)
    before = per_op()
    with tempfile.TemporaryDirectory() as log_dir:
        with jax_accl.profiler.trace(log_dir) as traced:
            during = per_op()
    after = per_op()
    return {
        "before": before,
        "during": during,
        "after": after,
        "events": traced.native_events,
        "loop": loop,
    }


def main(args) -> int:
    """Alternates plugin and control processes; prints the medians of each kind."""
    runs = {"plugin": [], "control": []}
    for _ in range(PROCESSES):
        for kind in runs:
            command = [
                sys.executable,
                "-c",
                CHILD,
                kind,
                str(args.devices),
                str(args.loop),
                str(max(args.reps, 5) * 4),
            ]
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=600,
                env={**os.environ, "XLA_FLAGS": ""},
                cwd="/",
            )
            if done.returncode != 0:
                raise RuntimeError(f"profiler cost ({kind}) failed:\n{done.stderr[-3000:]}")
            runs[kind].append(json.loads(done.stdout.splitlines()[-1]))
    loop = runs["plugin"][0]["loop"]
    print(
        f"# {SIZE >> 10}KiB all-reduce over {args.devices} devices, per op ({loop} and "
        f"{2 * loop} chained), medians of {PROCESSES} processes of each kind"
    )
    print(f"{'':>24}{'no session yet':>16}{'after one':>12}{'inside one':>12}{'after/before':>14}")
    for kind, label in (("plugin", "jax_accl's plugin"), ("control", "without (XLA alone)")):
        m = {k: statistics.median(r[k] for r in runs[kind]) for k in ("before", "after", "during")}
        ratio = statistics.median(r["after"] / r["before"] for r in runs[kind])
        print(
            f"{label:>24}{m['before'] * 1e6:>13.1f} us{m['after'] * 1e6:>9.1f} us"
            f"{m['during'] * 1e6:>9.1f} us{ratio:>13.3f}x"
        )
    print(
        f"# jax_accl events recorded inside a session: {runs['plugin'][0]['events']} "
        f"(plugin), {runs['control'][0]['events']} (control)"
    )
    return 0
