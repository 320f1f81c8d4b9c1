"""The custom call shows by name in HLO and in a jax.profiler trace; jax_accl.profiler
merges the native events onto JAX's timeline; every private JAX API jax_accl relies on
is still where _compat expects it."""

import glob
import gzip
import json
import os

import jax
import numpy as np
from accl_testing import P, put, values

import jax_accl
from jax_accl import _compat


def _program():
    mesh = jax.make_mesh((8,), ("i",))
    x = put(mesh, values((8, 64), "float32"), P("i"))
    fn = jax.jit(
        jax.shard_map(lambda a: jax_accl.psum(a, "i"), mesh=mesh, in_specs=P("i"), out_specs=P())
    )
    return fn, x


def test_hlo_has_one_named_custom_call():
    fn, x = _program()
    hlo = fn.lower(x).compile().as_text()
    assert hlo.count('custom_call_target="accl_allreduce"') == 1
    # The instruction name the profiler shows: algorithm (the cost model's pick) and size.
    assert "%accl_allreduce_direct_256B" in hlo
    assert "all-reduce(" not in hlo  # XLA's own all-reduce is not used


def test_profiler_trace_names_the_allreduce(tmp_path):
    fn, x = _program()
    jax.block_until_ready(fn(x))
    with jax.profiler.trace(str(tmp_path)):
        jax.block_until_ready(fn(x))
    files = glob.glob(os.path.join(tmp_path, "**", "*.xplane.pb"), recursive=True)
    assert files, "the profiler wrote no trace"
    data = b"".join(open(f, "rb").read() for f in files)
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    assert b"accl_allreduce" in data
    assert b"ffi_call" not in data


def test_jax_accl_profiler_merges_native_events_on_jax_clock(tmp_path):
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
    jax.block_until_ready(fn(x))
    with jax_accl.profiler.trace(str(tmp_path)) as result:
        jax.block_until_ready(fn(x))
    assert result.path.endswith("perfetto_trace.json.gz")
    assert result.native_events == 16  # two calls on eight devices
    with gzip.open(result.path, "rt") as f:
        events = json.load(f)["traceEvents"]
    xla = [e for e in events if e.get("name", "").startswith("accl_allreduce_") and "dur" in e]
    native_pid = {
        e["pid"]
        for e in events
        if e.get("name") == "process_name" and e["args"]["name"].startswith("jax_accl native")
    }
    assert len(native_pid) == 1
    native = [e for e in events if e.get("pid") in native_pid and e.get("ph") == "X"]
    assert len(native) == 16 and len(xla) == 16
    assert all(
        e["name"].startswith("accl_allreduce ") and e["name"].endswith("1MiB") for e in native
    )
    assert all(e["args"]["bytes"] == 1 << 20 for e in native)
    # Every native call starts when XLA launches the same call on the same device (XLA's
    # event covers the launch; the call runs on the device's worker and completes a
    # future), with the clocks aligned to well under a millisecond; each device's two
    # calls are ordered.
    for device in range(8):
        ours = sorted((e for e in native if e["tid"] == device), key=lambda e: e["ts"])
        theirs = sorted(
            (e for e in xla if e["args"]["device_ordinal"] == str(device)), key=lambda e: e["ts"]
        )
        assert len(ours) == len(theirs) == 2
        for a, b in zip(ours, theirs):
            assert b["ts"] - 500 <= a["ts"] <= b["ts"] + b["dur"] + 2000
        assert ours[0]["ts"] + ours[0]["dur"] <= ours[1]["ts"]


def test_compat_names_exist():
    for name in [
        "check_vma_enabled",
        "auto_pcast_enabled",
        "varying_axes",
        "with_varying_axes",
        "pvary",
        "skip_size_one_axes",
        "validate_axis_index_groups",
        "canonicalize_axis_index_groups",
        "value_state_along",
        "insert_collective_pvary",
        "replica_groups",
        "check_axis_names",
        "linear_jvp",
        "ct_aval",
        "const_like",
        "mesh_axis_names",
        "module_scratch",
        "device_assignment",
        "distributed_client",
        "use_gloo_on_interface",
        "unreduced_axes",
        "hook_bind",
        "hook_bind_psum_invariant",
        "define_bool_state",
        "update_config",
        "is_partial_manual",
        "lower_fully_manual",
        "spec_along_auto_axes",
        "partition_index",
        "lowering_rule",
    ]:
        assert callable(getattr(_compat, name)), name
    # The primitives routing takes over, and the rule fusion wraps.
    for prim in ["pvary_p", "psum_invariant_p", "psum_p", "pmax_p", "pmin_p", "shard_map_p"]:
        assert isinstance(getattr(_compat, prim), _compat.core.Primitive), prim
    assert callable(_compat.lowering_rule(_compat.shard_map_p))
    assert callable(_compat._parallel.bind_psum_invariant)
    for module in ["ad", "batching", "core", "dispatch", "hlo", "ir", "mlir", "pxla"]:
        assert getattr(_compat, module) is not None
    assert np.asarray(_compat.const_like(np.float32(1), 3)).dtype == np.float32
