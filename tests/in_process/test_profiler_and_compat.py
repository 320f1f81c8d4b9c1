"""The custom call shows by name in HLO and in a jax.profiler trace (its native events:
test_profiler.py); every private JAX API jax_accl relies on is still where _compat
expects it."""

import glob
import gzip
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
        "register_plugin_profiler",
        "register_ffi_type",
        "use_gloo_on_interface",
        "unreduced_axes",
        "def_high_operands",
        "hook_bind",
        "hook_bind_psum_invariant",
        "check_psum_invariant",
        "primitive_counts",
        "jax_collective_names",
        "define_bool_state",
        "update_config",
        "is_partial_manual",
        "lower_fully_manual",
        "spec_along_auto_axes",
        "lowering_rule",
        "hook_lowering_caches",
        "hook_module_lowering",
        "lowered_module",
        "hook_loading",
        "hook_custom_partitioning",
        "module_context_scratch",
        "compiled_text",
    ]:
        assert callable(getattr(_compat, name)), name
    # What lanes.py hooks: both lowering caches of a module context, the module lowering.
    from jax_accl.primitives import lanes

    assert getattr(_compat.mlir.ModuleContext.__init__, "_jax_accl_hooked", False)
    assert getattr(_compat.mlir.lower_jaxpr_to_module, "_jax_accl_hooked", False)
    import inspect

    init = inspect.signature(_compat.mlir.ModuleContext.__init__.__wrapped__)
    assert {"lowering_cache", "cached_primitive_lowerings"} <= set(init.parameters)
    assert issubclass(lanes.LoweringCache, dict)
    # ... custom_partitioning's callback record (its rule and module context), and the
    # loading of every executable jax runs (xla_subsets.py's and lanes.py's checks).
    from jax._src import custom_partitioning

    record = custom_partitioning._ShardingCallbackInfo.__init__
    assert getattr(record, "_jax_accl_hooked", False)
    assert {"partition", "module_context"} <= set(inspect.signature(record.__wrapped__).parameters)
    hooked, checks = _compat.pxla.UnloadedMeshExecutable.load, []
    while hooked is not None:
        checks.append(getattr(hooked, "_jax_accl_check", None))
        hooked = getattr(hooked, "_jax_accl_inner", None)
    assert lanes.check_compiled in checks
    # The primitives routing takes over, and the rule fusion wraps.
    for prim in ["pvary_p", "psum_invariant_p", "psum_p", "pmax_p", "pmin_p", "shard_map_p"]:
        assert isinstance(getattr(_compat, prim), _compat.core.Primitive), prim
    assert callable(_compat.lowering_rule(_compat.shard_map_p))
    assert callable(_compat._parallel.bind_psum_invariant)
    assert callable(_compat.psum_invariant_p.abstract_eval)  # check_psum_invariant's
    # jax_accl.collectives' "not_routed": the collective primitives, no cast among them.
    assert {"psum", "psum_invariant", "ppermute", "all_gather"} <= _compat.jax_collective_names()
    assert "axis_index" not in _compat.jax_collective_names()
    for module in ["ad", "batching", "core", "dispatch", "hlo", "ir", "mlir", "pxla"]:
        assert getattr(_compat, module) is not None
    assert np.asarray(_compat.const_like(np.float32(1), 3)).dtype == np.float32
    # What register_ffi_type installs before JAX's CPU backend would.
    from jax._src.lib import _jax, xla_client

    assert callable(_jax.register_custom_type)
    assert callable(xla_client.register_custom_type_handler)


def test_the_thread_guard_refusal_text_is_still_jaxlibs():
    """_compat.refused_before_launch knows JAX's thread-guard refusal by its text: the
    installed jaxlib must still carry it (else a refused program would count as run and
    make later splits ambiguous; tests/multiprocess/test_xla_unrun_programs.py runs it)."""
    import jaxlib

    text = _compat._THREAD_GUARD_REFUSAL.encode()
    libraries = glob.glob(os.path.join(os.path.dirname(jaxlib.__file__), "**", "*.so*"))
    libraries += glob.glob(os.path.join(os.path.dirname(jaxlib.__file__), "*.so*"))
    assert libraries, "no jaxlib library found"
    carrying = [path for path in set(libraries) if text in open(path, "rb").read()]
    assert carrying, f"no jaxlib library holds the thread guard's text {text!r}"
    assert _compat.refused_before_launch(RuntimeError("x: " + text.decode() + " 3"))
    assert not _compat.refused_before_launch(RuntimeError("INTERNAL: a device failed"))
