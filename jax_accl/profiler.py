"""jax_accl in JAX's own profiler.

At import, jax_accl registers a profiler plugin with XLA (xla_ffi/profiler/
plugin_profiler.h, through the PJRT profiler extension), so every profiling session of
the process carries jax_accl's native events in its XSpace, the ``*.xplane.pb`` that
TensorBoard's profile plugin and xprof read: ``jax.profiler.trace``,
``start_trace``/``stop_trace``, and captures through ``jax.profiler.start_server``. The
plane is ``/device:CUSTOM:jax_accl``: a line per device ("device 3"), an event per
all-reduce ("accl_allreduce ring 16MiB", with its algorithm, bytes and call) and one per
phase of its schedule (local and host reduce-scatter and all-gather, the step between
hosts on each rail with the rail's bytes, cross-memory attach), on the profiler's clock:
in the trace viewer they sit beside XLA's event of the same call
(``accl_allreduce_ring_16MiB.7``). Outside a session nothing is recorded.

``jax_accl.profiler.trace`` is a convenience around ``jax.profiler.trace``:

    with jax_accl.profiler.trace("/tmp/trace") as result:
        train_step(...)
    print(result.path)  # a Perfetto trace (gzipped JSON): ui.perfetto.dev
    print(result.native_events)  # jax_accl's events in it

and ``native_events(xplane_path)`` reads jax_accl's events back from a profile.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os

import jax

PLANE_NAME = "/device:CUSTOM:jax_accl"


@dataclasses.dataclass
class TraceResult:
    log_dir: str
    path: str = ""  # the Perfetto trace, once the block has exited
    xplane: str = ""  # the XSpace TensorBoard and xprof read
    native_events: int = 0


@contextlib.contextmanager
def trace(log_dir: str, **kwargs):
    """``jax.profiler.trace(log_dir, create_perfetto_trace=True, **kwargs)``; the result
    names the files it wrote and counts jax_accl's events in them."""
    result = TraceResult(log_dir=str(log_dir))
    before = set(_run_files(result.log_dir, "*.xplane.pb"))
    with jax.profiler.trace(result.log_dir, create_perfetto_trace=True, **kwargs):
        yield result
    new = [f for f in _run_files(result.log_dir, "*.xplane.pb") if f not in before]
    if new:
        result.xplane = new[0]
        perfetto = os.path.join(os.path.dirname(new[0]), "perfetto_trace.json.gz")
        result.path = perfetto if os.path.exists(perfetto) else ""
        result.native_events = len(native_events(result.xplane))


def _run_files(log_dir: str, pattern: str) -> list[str]:
    return sorted(glob.glob(os.path.join(log_dir, "plugins", "profile", "*", pattern)))


def native_events(xplane_path: str) -> list[dict]:
    """jax_accl's events in the profile at `xplane_path`, in time order: [{"name",
    "device", "start_ns", "duration_ns", "bytes", "call", ...}] (times relative to the
    session's start, as in every plane of the profile)."""
    profile = jax.profiler.ProfileData.from_file(xplane_path)
    plane = profile.find_plane_with_name(PLANE_NAME)
    if plane is None:
        return []
    events = []
    for line in plane.lines:
        device = int(line.name.split()[-1])
        for e in line.events:
            events.append(
                {
                    "name": e.name,
                    "device": device,
                    "start_ns": e.start_ns,
                    "duration_ns": e.duration_ns,
                    **dict(e.stats),
                }
            )
    return sorted(events, key=lambda e: e["start_ns"])
