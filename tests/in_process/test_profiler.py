"""jax_accl's native events in the XSpace of every profiling session, as TensorBoard and
xprof read it: a plain jax.profiler.trace, start_trace/stop_trace, the jax_accl.profiler
wrapper and a capture through jax.profiler.start_server. Each run is converted by
xprof's own trace-viewer converter or read back with jax.profiler.ProfileData; the
events must sit on the profile's clock beside XLA's event of the same call."""

import glob
import json
import os
import subprocess
import sys
import textwrap
import time

import jax
import pytest
from accl_testing import P, put, values
from xprof.convert import raw_to_tool_data

import jax_accl
from jax_accl import profiler

CALL = "accl_allreduce reduce_broadcast 1MiB"


def _program():
    """Two dependent 1 MiB all-reduces over 8 devices (16 native calls per run)."""
    mesh = jax.make_mesh((8,), ("i",))
    x = put(mesh, values((8, 1 << 18), "float32"), P("i"))
    fn = jax.jit(
        jax.shard_map(
            lambda a: jax_accl.psum(jax_accl.psum(a, "i") * 0.5, "i"),
            mesh=mesh,
            in_specs=P("i"),
            out_specs=P("i"),
            check_vma=False,
        )
    )
    jax.block_until_ready(fn(x))  # compiled and warm before any session
    return fn, x


def _xplane(log_dir) -> str:
    files = glob.glob(os.path.join(log_dir, "plugins", "profile", "*", "*.xplane.pb"))
    assert len(files) == 1, files
    return files[0]


def trace_viewer(xplane: str) -> list[dict]:
    """The trace viewer's events for `xplane`, as TensorBoard's profile plugin gets them."""
    data, content_type = raw_to_tool_data.xspace_to_tool_data([xplane], "trace_viewer", {})
    assert content_type == "application/json"
    return json.loads(data)["traceEvents"]


def test_a_plain_jax_profiler_trace_has_the_native_events_beside_xlas(tmp_path):
    fn, x = _program()
    started = time.perf_counter()
    with jax.profiler.trace(str(tmp_path)):
        jax.block_until_ready(fn(x))
    profiled_us = (time.perf_counter() - started) * 1e6
    events = trace_viewer(_xplane(tmp_path))
    processes = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    (ours,) = [pid for pid, name in processes.items() if name == profiler.PLANE_NAME]
    threads = {
        e["tid"]: e["args"]["name"]
        for e in events
        if e.get("name") == "thread_name" and e["pid"] == ours
    }
    assert sorted(threads.values()) == [f"device {d}" for d in range(8)]
    native = [e for e in events if e.get("pid") == ours and e.get("ph") == "X"]
    assert len(native) == 16 and all(e["name"] == CALL for e in native)
    assert all(e["args"]["bytes"] == str(1 << 20) for e in native)
    assert all(e["args"]["algorithm"] == "reduce_broadcast" for e in native)
    # The call's name: its op and group (its per-launch count only for a repeated call).
    assert all(
        "jax_accl.psum" in e["args"]["call"] and "group [" in e["args"]["call"] for e in native
    )
    xla = [e for e in events if e.get("name", "").startswith("accl_allreduce_") and "dur" in e]
    assert len(xla) == 16
    lags = []
    for tid, name in threads.items():
        device = name.split()[-1]
        mine = sorted((e for e in native if e["tid"] == tid), key=lambda e: e["ts"])
        theirs = sorted(
            (e for e in xla if e["args"]["device_ordinal"] == device), key=lambda e: e["ts"]
        )
        assert len(mine) == len(theirs) == 2
        # Inside the profiled interval, in order, each starting after XLA launches the
        # same call on the same device (XLA's event covers the launch; the call runs on
        # the device's worker thread, which 2 cores may start some ms later).
        assert 0 <= mine[0]["ts"] and mine[1]["ts"] + mine[1]["dur"] <= profiled_us
        assert mine[0]["ts"] + mine[0]["dur"] <= mine[1]["ts"]
        for a, b in zip(mine, theirs):
            assert b["ts"] - 500 <= a["ts"] <= b["ts"] + b["dur"] + 20_000
            lags.append(a["ts"] - b["ts"])
    # The clocks agree to well under a millisecond: the typical call starts within
    # 0.5 ms of its launch.
    assert -500 <= sorted(lags)[len(lags) // 2] <= 500, lags


def test_start_and_stop_trace_and_profile_data_find_the_plane(tmp_path):
    fn, x = _program()
    jax.block_until_ready(fn(x))  # outside any session: not recorded
    jax.profiler.start_trace(str(tmp_path))
    jax.block_until_ready(fn(x))
    jax.profiler.stop_trace()
    events = profiler.native_events(_xplane(tmp_path))
    assert len(events) == 16
    assert {e["device"] for e in events} == set(range(8))
    assert all(e["name"] == CALL and e["bytes"] == 1 << 20 for e in events)
    assert all(e["duration_ns"] > 0 for e in events)


def test_the_wrapper_names_its_files_and_counts_the_events(tmp_path):
    fn, x = _program()
    started = time.perf_counter()
    with jax_accl.profiler.trace(str(tmp_path)) as result:
        jax.block_until_ready(fn(x))
    profiled_us = (time.perf_counter() - started) * 1e6
    assert result.native_events == 16
    assert result.xplane == _xplane(tmp_path)
    assert result.path.endswith("perfetto_trace.json.gz") and os.path.exists(result.path)
    # What the trace viewer shows of it: the 16 calls, each device's in order, inside
    # the profiled interval.
    events = trace_viewer(result.xplane)
    processes = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    (ours,) = [pid for pid, name in processes.items() if name == profiler.PLANE_NAME]
    native = sorted(
        (e for e in events if e.get("pid") == ours and e.get("ph") == "X"),
        key=lambda e: (e["tid"], e["ts"]),
    )
    assert len(native) == 16 and all(e["name"] == CALL for e in native)
    assert all(0 <= e["ts"] and e["ts"] + e["dur"] <= profiled_us for e in native)
    for first, second in zip(native[::2], native[1::2]):
        assert first["tid"] == second["tid"] and first["ts"] + first["dur"] <= second["ts"]
    # A session without jax_accl calls has no jax_accl events: none leak from before.
    with jax_accl.profiler.trace(str(tmp_path / "empty")) as empty:
        jax.block_until_ready(x + 1)
    assert empty.native_events == 0


@pytest.mark.multiprocess  # the profiled process
def test_a_capture_through_the_profiler_server_has_the_native_events(tmp_path):
    """What TensorBoard's capture button does: a process serves its profiler
    (jax.profiler.start_server) while it trains; another asks it for a trace over gRPC
    (xprof's client, as `python -m jax.collect_profile` does)."""
    port = 20000 + os.getpid() % 20000
    program = textwrap.dedent(f"""
        import time, jax, jax_accl
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        mesh = Mesh(jax.devices(), ("i",))
        fn = jax.jit(jax.shard_map(lambda a: jax_accl.psum(a, "i"), mesh=mesh,
                                   in_specs=P("i"), out_specs=P()))
        x = jax.device_put(jax.numpy.ones((4, 1 << 16)), NamedSharding(mesh, P("i")))
        jax.block_until_ready(fn(x))
        jax.profiler.start_server({port})
        print("serving", flush=True)
        end = time.time() + 60
        while time.time() < end:
            jax.block_until_ready(fn(x))
            time.sleep(0.002)
    """)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    served = subprocess.Popen(
        [sys.executable, "-c", program], env=env, stdout=subprocess.PIPE, text=True, cwd="/"
    )
    try:
        assert served.stdout.readline().strip() == "serving"
        from xprof.convert import _pywrap_profiler_plugin

        options = {"host_tracer_level": 2, "device_tracer_level": 1, "python_tracer_level": 0}
        _pywrap_profiler_plugin.trace(
            f"127.0.0.1:{port}", str(tmp_path), "", True, 1500, 3, options
        )
    finally:
        served.kill()
        served.wait()
    events = profiler.native_events(_xplane(tmp_path))
    assert len(events) >= 8  # some calls of 4 devices in 1.5 s
    assert {e["device"] for e in events} == set(range(4))
    assert all(e["name"].startswith("accl_allreduce ") for e in events)
    assert all(e["bytes"] == 4 << 16 and e["duration_ns"] > 0 for e in events)  # 256 KiB
