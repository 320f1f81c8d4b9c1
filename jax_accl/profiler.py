"""Profile jax_accl inside JAX's own profiler.

    with jax_accl.profiler.trace("/tmp/trace") as result:
        train_step(...)
    print(result.path)   # a Perfetto trace (gzipped JSON): open it at ui.perfetto.dev

This wraps ``jax.profiler.trace`` (so TensorBoard's profile plugin / xprof read the run
directory as usual; each all-reduce shows there under its HLO name, e.g.
``accl_allreduce_reduce_broadcast_16MiB.7``) and, while it runs, has the native core
record an event per device for every all-reduce and for each phase of the hierarchical
schedule (local reduce-scatter, the inter-host step per rail with its bytes, local
all-gather). On exit those events are merged into the run's Perfetto and trace-viewer
JSON files, on a track "jax_accl native" with a thread per device, aligned to JAX's
clock through an annotation whose native time was recorded while JAX timed it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import gzip
import json
import os
import socket

import jax

from jax_accl import _accl

SYNC_NAME = "jax_accl clock sync"


@dataclasses.dataclass
class TraceResult:
    log_dir: str
    path: str = ""  # the merged Perfetto trace, once the block has exited
    native_events: int = 0


@contextlib.contextmanager
def trace(log_dir: str, **kwargs):
    """``jax.profiler.trace(log_dir, create_perfetto_trace=True, **kwargs)`` plus the
    native events of every all-reduce run inside the block."""
    result = TraceResult(log_dir=str(log_dir))
    before = set(_trace_files(result.log_dir))
    _accl.trace_take()  # drop anything recorded earlier
    _accl.trace_enable(True)
    try:
        with jax.profiler.trace(result.log_dir, create_perfetto_trace=True, **kwargs):
            with jax.profiler.TraceAnnotation(SYNC_NAME):
                sync_ns = _accl.now_ns()
            yield result
    finally:
        _accl.trace_enable(False)
    events = _accl.trace_take()
    new_files = [f for f in _trace_files(result.log_dir) if f not in before]
    for path in new_files:
        merge_native_events(path, events, sync_ns)
    perfetto = [f for f in new_files if f.endswith("perfetto_trace.json.gz")]
    result.path = perfetto[0] if perfetto else (new_files[0] if new_files else "")
    result.native_events = len(events)


def _trace_files(log_dir: str) -> list[str]:
    return sorted(glob.glob(os.path.join(log_dir, "plugins", "profile", "*", "*.json.gz")))


def merge_native_events(path: str, events: list[dict], sync_ns: int) -> None:
    """Adds `events` (native clock, ns) to the trace at `path` (JAX's clock, us)."""
    with gzip.open(path, "rt") as f:
        data = json.load(f)
    trace_events = data["traceEvents"] if isinstance(data, dict) else data
    sync = next((e for e in trace_events if e.get("name") == SYNC_NAME and "ts" in e), None)
    if sync is None:
        raise RuntimeError(f"{path}: the clock sync annotation is missing")
    # The native clock was read inside the annotation: map it to the annotation's middle.
    offset_us = sync["ts"] + sync.get("dur", 0) / 2 - sync_ns / 1000
    pid = (
        max((e.get("pid", 0) for e in trace_events if isinstance(e.get("pid"), int)), default=0) + 1
    )
    trace_events.append(
        {
            "ph": "M",
            "pid": pid,
            "name": "process_name",
            "args": {
                "name": f"jax_accl native ({socket.gethostname()}, process {jax.process_index()})"
            },
        }
    )
    for device in sorted({e["device"] for e in events}):
        trace_events.append(
            {
                "ph": "M",
                "pid": pid,
                "tid": int(device),
                "name": "thread_name",
                "args": {"name": f"device {device}"},
            }
        )
    for e in events:
        trace_events.append(
            {
                "ph": "X",
                "pid": pid,
                "tid": int(e["device"]),
                "name": e["name"],
                "ts": e["start_ns"] / 1000 + offset_us,
                "dur": max(e["end_ns"] - e["start_ns"], 0) / 1000,
                "args": {"bytes": e["bytes"], "call": e["detail"]},
            }
        )
    with gzip.open(path, "wt") as f:
        json.dump(data, f)
