"""Where an all-reduce's time between hosts goes, step by step (`bench --steps`): a few
calls of each algorithm under jax_accl's profiler, and process 0's native events of the
step between hosts (runtime/call_record.cc: "step between hosts k from p", one per message
received, and "step between hosts k sends", a wait for the step's sends; recorded while
_accl.set_step_times is on) grouped into the
schedule's steps, with the median over the calls of each step's time, its bytes and its
rate; and the bytes each rail carried per call."""

from __future__ import annotations

import re
import statistics
import tempfile

import jax

import jax_accl
from jax_accl.bench import sweep, timing
from jax_accl.units import human

_STEP = re.compile(r"step between hosts (\d+) (from (\d+)|sends)")
_RAIL = re.compile(r"inter-host \S+ rail (\S+)")


def measure(size_bytes: int, n: int, hosts: int, algorithms: list[str], reps: int) -> list[dict]:
    """One summary per algorithm (see summarize; "hosts:X": the automatic plan with X
    between hosts, as _accl.set_between_hosts forces it): `reps` programs of 8 chained calls (as
    the sweep times them: each call feeds the next), after a warm-up, every program
    started by all processes together; the first call of each program is left out (it
    waits for the processes' start)."""
    from jax_accl import _accl

    _accl.set_step_times(True)
    mesh = sweep.mesh_of(n)
    x = sweep.sharded_rows(mesh, sweep.BenchRows(size_bytes, n))
    out = []
    for algorithm in algorithms:
        # "hosts:X": the automatic plan (the hierarchy) with X between hosts.
        forced, _, between = algorithm.partition("hosts:")
        _accl.set_between_hosts(between or "auto")
        reduce = lambda v, a=forced or "auto": jax_accl.allreduce(v, "i", algorithm=a)  # noqa: E731
        program = sweep.chained(mesh, reduce, CHAINED)
        try:
            for _ in range(2):
                jax.block_until_ready(program(x))
            with tempfile.TemporaryDirectory() as log_dir:
                with jax_accl.profiler.trace(log_dir) as result:
                    for rep in range(reps):
                        timing.barrier(f"steps-{algorithm}-{size_bytes}-{rep}")
                        jax.block_until_ready(program(x))
                events = jax_accl.profiler.native_events(result.xplane) if result.xplane else []
        finally:
            _accl.set_between_hosts("auto")
        out.append(summarize(events, size_bytes, algorithm, hosts))
    return out


CHAINED = 8


def summarize(events: list[dict], size_bytes: int, algorithm: str, hosts: int) -> dict:
    """{"algorithm", "size_bytes", "call_ms" (median whole call), "steps": [{"step",
    "peer", "bytes", "ms", "sends_ms"}] (medians over calls), "rail_bytes": {rail: bytes
    per call}} from the lowest device's events, the steps as group_steps makes them."""
    device = min((e["device"] for e in events), default=0)
    mine = [e for e in events if e["device"] == device]
    calls = [e for e in mine if e["name"].startswith("accl_allreduce")]
    calls = [c for k, c in enumerate(calls) if k % CHAINED]  # each program's first waits
    per_call = []
    rails: dict[str, list[int]] = {}
    for call in calls:
        begin, end = call["start_ns"], call["start_ns"] + call["duration_ns"]
        inside = [e for e in mine if begin <= e["start_ns"] <= end and e is not call]
        records = []
        for e in inside:
            m = _STEP.match(e["name"])
            if m:
                peer = int(m.group(3)) if m.group(3) else -1
                records.append((int(m.group(1)), peer, int(e.get("bytes", 0)), e["duration_ns"]))
            r = _RAIL.match(e["name"])
            if r:
                rails.setdefault(r.group(1), []).append(int(e.get("bytes", 0)))
        per_call.append((call["duration_ns"], group_steps(records, hosts)))
    if not per_call:
        return {"algorithm": algorithm, "size_bytes": size_bytes, "steps": [], "rail_bytes": {}}
    count = min(len(steps) for _, steps in per_call)
    steps = []
    for k in range(count):
        at = [s[k] for _, s in per_call]
        steps.append(
            {
                "step": k,
                "peer": at[0]["peer"],
                "bytes": at[0]["bytes"],
                "ms": statistics.median(s["ns"] for s in at) / 1e6,
                "sends_ms": statistics.median(s["sends_ns"] for s in at) / 1e6,
            }
        )
    return {
        "algorithm": algorithm,
        "size_bytes": size_bytes,
        "call_ms": statistics.median(d for d, _ in per_call) / 1e6,
        "steps": steps,
        "rail_bytes": {rail: sum(b) // len(per_call) for rail, b in sorted(rails.items())},
    }


def group_steps(records: list[tuple], hosts: int) -> list[dict]:
    """(number, peer, bytes, ns) records of one call, in time order, as schedule steps,
    summed over the pipeline's chunks (each chunk numbers its records from 0): a step is
    the receives since the last wait for sends and that wait; where a chunk has no wait
    before its last (the streamed ring, whose 2(n-1) steps all receive from one peer
    with no pause), its receives are cut evenly into 2(n-1) steps."""
    chunks: list[list[dict]] = []
    for number, peer, nbytes, ns in records:
        if number == 0 or not chunks:
            chunks.append([])
        steps = chunks[-1]
        if not steps or steps[-1]["closed"]:
            steps.append({"peer": peer, "bytes": 0, "ns": 0, "sends_ns": 0, "records": []})
            steps[-1]["closed"] = False
        step = steps[-1]
        step["ns"] += ns
        if peer < 0:
            step["sends_ns"] += ns
            step["closed"] = True
        else:
            step["peer"] = peer
            step["bytes"] += nbytes
            step["records"].append((peer, nbytes, ns))
    ring_steps = 2 * (hosts - 1)
    total: list[dict] = []
    for steps in chunks:
        if len(steps) == 1 and len(steps[0]["records"]) % ring_steps == 0 and ring_steps > 1:
            whole, per = steps[0], len(steps[0]["records"]) // ring_steps
            steps = [
                {
                    "peer": whole["peer"],
                    "bytes": sum(r[1] for r in whole["records"][k * per : (k + 1) * per]),
                    "ns": sum(r[2] for r in whole["records"][k * per : (k + 1) * per]),
                    "sends_ns": whole["sends_ns"] if k == ring_steps - 1 else 0,
                }
                for k in range(ring_steps)
            ]
            steps[-1]["ns"] += whole["sends_ns"]
        for k, step in enumerate(steps):
            if k == len(total):
                total.append({"peer": step["peer"], "bytes": 0, "ns": 0, "sends_ns": 0})
            for key in ("bytes", "ns", "sends_ns"):
                total[k][key] += step[key]
    return total


def print_summary(summaries: list[dict], hosts: int, rate_bytes_s: float) -> None:
    """A table per algorithm: each step's median time, bytes received and the rate they
    came at (against the rails' `rate_bytes_s`), and the bytes per rail per call."""
    for s in summaries:
        if not s["steps"]:
            print(f"# steps: {s['algorithm']} {human(s['size_bytes'])}: no step events")
            continue
        total = sum(step["ms"] for step in s["steps"])
        print(
            f"# steps between hosts, {s['algorithm']} {human(s['size_bytes'])}, {hosts} hosts: "
            f"call {s['call_ms']:.1f} ms (median), steps {total:.1f} ms; per rail per call: "
            + ", ".join(f"{rail} {human(b)}" for rail, b in s["rail_bytes"].items())
        )
        header = ("step", 5), ("peer", 5), ("received", 10), ("ms", 8), ("waits", 8), ("MB/s", 8)
        print(" ".join(f"{name:>{width}}" for name, width in header) + f" {'x rails':>8}")
        for step in s["steps"]:
            mbs = step["bytes"] / (step["ms"] * 1e-3) / 1e6 if step["ms"] > 0 else 0.0
            share = (
                step["bytes"] / rate_bytes_s / (step["ms"] * 1e-3)
                if rate_bytes_s and step["ms"]
                else 0
            )
            print(
                f"{step['step']:>5} {step['peer']:>5} {human(step['bytes']):>10} "
                f"{step['ms']:>8.2f} {step['sends_ms']:>8.2f} {mbs:>8.1f} "
                + (f"{1 / share:>7.2f}x" if share else f"{'':>8}")
            )
