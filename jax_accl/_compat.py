"""Every private JAX API jax_accl uses, in one place (they move between versions).

tests/in_process/test_profiler_and_compat.py checks that each of them is still there.
"""

import threading
import time
import weakref

import jax.ffi as jax_ffi
from jax._src import config as _config
from jax._src import core, dispatch
from jax._src import distributed as _distributed
from jax._src import mesh as _mesh_lib
from jax._src.interpreters import ad, batching, mlir, pxla
from jax._src.lax import lax as _lax_internal
from jax._src.lax import parallel as _parallel
from jax._src.lib.mlir import ir
from jax._src.lib.mlir.dialects import hlo
from jax._src.mesh import get_abstract_mesh as _get_abstract_mesh
from jax.sharding import PartitionSpec

__all__ = ["ad", "batching", "core", "dispatch", "hlo", "ir", "mlir", "pxla"]


def check_vma_enabled() -> bool:
    """True inside shard_map(check_vma=True) tracing (jax.lax.psum then binds psum_invariant)."""
    return bool(_config._check_vma.value)


def auto_pcast_enabled() -> bool:
    return bool(_config.auto_pcast.value)


def varying_axes(aval) -> frozenset:
    """The mesh axes along which a value varies (its varying-manual-axes type)."""
    return aval.mat.varying


def with_varying_axes(aval, varying: frozenset):
    return aval.update(manual_axis_type=aval.mat.update(varying=varying))


def pvary(x, axes: tuple):
    return core.pvary(x, axis_name=axes)


def _uses_name(fn, name: str) -> bool:
    """Whether `fn` or a function nested in it reads the global `name`."""
    stack = [fn.__code__]
    while stack:
        code = stack.pop()
        if name in code.co_names:
            return True
        stack.extend(k for k in code.co_consts if hasattr(k, "co_names"))
    return False


# The reductions whose jax.lax form refuses an operand that varies along only some of
# the axes (psum always; pmax and pmin from jax 0.11 or 0.12 on): jax_accl refuses
# them too, and computes the others.
STATE_CHECKED_OPS = frozenset(
    op
    for op, fn in (("sum", _parallel.psum), ("max", _parallel.pmax), ("min", _parallel.pmin))
    if _uses_name(fn, "_get_from") or op == "sum"
)


def unreduced_axes(aval) -> frozenset:
    return frozenset(getattr(aval.mat, "unreduced", ()) or ())


def def_high_operands(primitive, bind_low) -> None:
    """Lets `primitive` take JAX's "high" values: from jax 0.12.1 on, a value unreduced
    along some axes is one (an UnreducedArray: aval.is_high, its low value each device's
    partial sum, typed varying there, with a leading dimension per unreduced Explicit
    axis), and JAX asks each primitive that takes one to say so (is_high) and to bind
    itself on the low values (to_lojax); one that does not (jax_accl's did not) fails
    when jax lowers the program ('UnreducedArray' object has no attribute 'val'). Here
    `bind_low(lo_vals, leading, **params)` binds `primitive`'s computation on the low
    values (`leading[k]`: operand k's count of leading unreduced dimensions) and returns
    a list of results, each raised to the type abstract eval gives. No value is high
    before jax 0.12.1."""

    def is_high(*avals, **params):
        return any(aval.is_high for aval in avals)

    def to_lojax(*hi_vals, **params):
        avals = [core.typeof(v) for v in hi_vals]
        out_avals, _ = primitive.abstract_eval(*avals, **params)
        lo_vals = [lo for aval, v in zip(avals, hi_vals) for lo in aval.lower_val(v)]
        leading = [len(aval.sharding.spec.unreduced) for aval in avals]
        lo_outs = bind_low(lo_vals, leading, **params)
        if not primitive.multiple_results:
            return out_avals.raise_val(*lo_outs)
        return [aval.raise_val(lo) for aval, lo in zip(out_avals, lo_outs)]

    primitive.is_high = is_high
    primitive.to_lojax = to_lojax


# JAX's collective primitives that routing (jax_accl/routing.py) takes over.
pvary_p = core.pvary_p
psum_invariant_p = _parallel.psum_invariant_p
psum_p = _parallel.psum_p
pmax_p = _parallel.pmax_p
pmin_p = _parallel.pmin_p
reduce_scatter_p = _parallel.reduce_scatter_p
all_gather_p = _parallel.all_gather_p
all_gather_invariant_p = _parallel.all_gather_invariant_p
# JAX's reduced and unreduced collectives (absent from a jax that has no such types).
all_gather_reduced_p = getattr(_parallel, "all_gather_reduced_p", None)
unreduced_reduce_scatter_p = getattr(_parallel, "unreduced_reduce_scatter_p", None)
ppermute_p = _parallel.ppermute_p
all_to_all_p = _parallel.all_to_all_p
ragged_all_to_all_p = _parallel.ragged_all_to_all_p


def hook_bind(primitive, make_bind) -> None:
    """Replaces `primitive.bind` on the instance with make_bind(original bind)."""
    primitive.bind = make_bind(primitive.bind)


def hook_transpose(primitive, make_rule) -> None:
    """Replaces `primitive`'s transpose rule with make_rule(original rule): in
    ad.primitive_transposes (jax 0.10) or ad.fancy_transposes (jax 0.12: shard_map's
    transpose accumulates into its arguments); both take (cts, *args, jaxpr=, ...)."""
    for table in (ad.primitive_transposes, getattr(ad, "fancy_transposes", {})):
        if primitive in table:
            table[primitive] = make_rule(table[primitive])
            return
    raise NotImplementedError(f"jax_accl: this jax has no transpose rule for {primitive}")


def primitive_names_in(jaxpr) -> set[str]:
    """The names of every primitive `jaxpr` binds, in its sub-jaxprs too."""
    names = {eqn.primitive.name for eqn in jaxpr.eqns}
    for sub in core.subjaxprs(jaxpr):
        names |= primitive_names_in(sub)
    return names


def primitive_counts(jaxpr, names) -> dict:
    """{name: binds} of the primitives named in `names` that `jaxpr` binds, in its
    sub-jaxprs too."""
    counts: dict = {}
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in names:
            counts[eqn.primitive.name] = counts.get(eqn.primitive.name, 0) + 1
    for sub in core.subjaxprs(jaxpr):
        for name, n in primitive_counts(sub, names).items():
            counts[name] = counts.get(name, 0) + n
    return counts


# JAX's primitives that move no data: the varying and unreduced type casts, axis_index.
_NOT_COLLECTIVES = frozenset(
    {"axis_index", "pvary", "preduced", "vary_unreduced_cast", "vary_unreduced_cast_p"}
)


def jax_collective_names() -> frozenset:
    """The names of this jax's collective primitives: those jax._src.lax.parallel defines
    (jax 0.12's pmax_scatter, pmin_scatter and pxor included), but the casts."""
    defined = {p.name for p in vars(_parallel).values() if isinstance(p, core.Primitive)}
    return frozenset(defined - _NOT_COLLECTIVES)


def check_psum_invariant(x, axes: tuple) -> None:
    """Raises what jax's psum_invariant raises for `x` over the mesh axes of `axes` (the
    axes `x` must vary along: jax 0.10 wants one of them, jax 0.12 all)."""
    mesh_axes = tuple(a for a in axes if a in mesh_axis_names())
    if mesh_axes:
        psum_invariant_p.abstract_eval(core.typeof(x), axes=mesh_axes)


def hook_bind_psum_invariant(make_bind) -> None:
    """jax.lax.psum binds each leaf through parallel.bind_psum_invariant under
    check_vma=True (inserting a pvary for the axes the leaf is invariant along first);
    replaced by make_bind(original)."""
    _parallel.bind_psum_invariant = make_bind(_parallel.bind_psum_invariant)


def define_bool_state(name: str, default: bool, help_text: str):
    """A JAX config option (thread-local as a context, global via jax.config.update)
    that is part of the trace and jit cache keys."""
    return _config.bool_state(name, default, help_text, include_in_trace_context=True)


def update_config(name: str, value) -> None:
    import jax

    jax.config.update(name, value)


# Argument handling shared with jax.lax.psum, so that both accept and reject alike.
skip_size_one_axes = _parallel._maybe_skip_one_sized_axes
validate_axis_index_groups = _parallel._validate_reduce_axis_index_groups
canonicalize_axis_index_groups = _parallel._canonicalize_axis_index_groups
value_state_along = _parallel._get_from  # 'varying' | 'invarying' | 'unreduced' | 'reduced'
insert_collective_pvary = _parallel.insert_collective_pvary
replica_groups = _parallel._replica_groups  # (axis_context, axes, axis_index_groups)
check_axis_names = _parallel._check_axis_names
linear_jvp = ad.linear_jvp


def ct_aval(aval):
    """The cotangent type of a primal aval (named to_ct_aval since jax 0.10)."""
    to_ct = getattr(aval, "to_ct_aval", None) or aval.to_tangent_aval
    return to_ct()


def move_nonzero(values, move, zeros) -> list:
    """A linear collective's JVP or transpose over a bucket: `move` applied, in one
    call, to the values that are not symbolic zeros; `zeros[k]` where value k is one."""
    live = [k for k, v in enumerate(values) if type(v) is not ad.Zero]
    out = list(zeros)
    for k, moved in zip(live, move([values[k] for k in live])):
        out[k] = moved
    return out


const_like = _lax_internal._const  # (like, python_scalar) -> constant of like's dtype, as psum uses


def mesh_axis_names() -> tuple:
    """Axis names of the mesh being traced (shard_map); vmapped axis names are not here."""
    return tuple(_get_abstract_mesh().axis_names)


def module_scratch(ctx) -> dict:
    """A dict that lives as long as the MLIR module being lowered (the `scratch` of its
    lowering cache, hooked by hook_lowering_caches)."""
    return module_context_scratch(ctx.module_context)


def module_context_scratch(module_context) -> dict:
    """module_scratch, from the module context."""
    scratch = getattr(module_context.cached_primitive_lowerings, "scratch", None)
    if scratch is None:
        raise RuntimeError(
            "jax_accl: a module is being lowered without jax_accl's lowering caches (was "
            "its lowering started before jax_accl was imported?); import jax_accl first"
        )
    return scratch


def hook_lowering_caches(cache_type) -> None:
    """Every module context's two lowering caches (JAX's per-equation cache, and its
    cache of lowered functions that nested jits and called jaxprs use) are instances
    of `cache_type` (a dict subclass taking the entries): a context made from another
    (replace) shares its caches, as JAX's own do."""
    init = mlir.ModuleContext.__init__
    if getattr(init, "_jax_accl_hooked", False):
        return

    def hooked(self, *args, **kwargs):
        init(self, *args, **kwargs)
        for name in ("lowering_cache", "cached_primitive_lowerings"):
            cache = getattr(self, name)
            if not isinstance(cache, cache_type):
                setattr(self, name, cache_type(cache))

    hooked._jax_accl_hooked, hooked.__wrapped__ = True, init
    mlir.ModuleContext.__init__ = hooked


def hook_module_lowering(wrap) -> None:
    """JAX lowers every program to an MLIR module (jit, pmap, shard_map) through
    mlir.lower_jaxpr_to_module: it becomes wrap(the original), which takes and returns
    what it does (lowered_module reads the module from its result)."""
    if getattr(mlir.lower_jaxpr_to_module, "_jax_accl_hooked", False):
        return
    hooked = wrap(mlir.lower_jaxpr_to_module)
    hooked._jax_accl_hooked = True
    mlir.lower_jaxpr_to_module = hooked


def lowered_module(result):
    """The MLIR module of what mlir.lower_jaxpr_to_module returned."""
    return result.module


def device_assignment(ctx) -> tuple:
    """The devices of a module being lowered, indexed by partition id (inside a region
    lower_fully_manual nests, whose mesh is abstract: the enclosing module's)."""
    axis_context = ctx.module_context.axis_context
    mesh = getattr(axis_context, "mesh", None)
    if mesh is not None and not isinstance(mesh, _mesh_lib.AbstractMesh):
        return tuple(mesh.devices.flat)
    assignment = getattr(axis_context, "device_assignment", None)
    if assignment is not None:
        return tuple(assignment)
    outer = getattr(_nested_lowering, "devices", None)
    if outer is not None:
        return outer
    raise NotImplementedError(
        "jax_accl: cannot tell which device runs each partition of this multi-process "
        f"program (axis context {type(axis_context).__name__}); use jax.shard_map over a Mesh"
    )


def register_plugin_profiler(capsule) -> None:
    """Has XLA's profiler call the profiler extension of the PJRT_Api in `capsule` in every
    session (how JAX registers a PJRT plugin's profiler)."""
    from jax._src.lib import _profiler

    _profiler.register_plugin_profiler(capsule)


def register_ffi_type(name: str, registration: dict) -> None:
    """jax.ffi.register_ffi_type, in effect at once. Until the CPU backend starts, JAX
    keeps both targets and types pending and (jaxlib 0.10) registers the targets first,
    which XLA refuses for a handler whose state has a type ("Types used by FFI handlers
    must be registered before the handler registration"): installing jaxlib's own type
    handler now (what make_cpu_client does) registers the type before any target."""
    from jax._src.lib import _jax, xla_client

    xla_client.register_custom_type_handler("cpu", _jax.register_custom_type)
    jax_ffi.register_ffi_type(name, registration, platform="cpu")


def distributed_client():
    """The client of jax.distributed's coordination service, or None before initialize()."""
    return _distributed.global_state.client


def distributed_state():
    """jax.distributed's state (process_id, num_processes, client)."""
    return _distributed.global_state


def recoverability_enabled() -> bool:
    """jax_enable_recoverability: the job goes on when a process dies (JAX's
    fault-tolerance API)."""
    return bool(_distributed._ENABLE_RECOVERABILITY.value)


def hook_live_devices(after) -> None:
    """Runs after({process: incarnation}) on every answer of the live-process query of
    jax.experimental.multihost_utils.live_devices (its module's _live_devices, which the
    context manager calls entering its first block and leaving each), before the block
    sees it. Wraps it once."""
    from jax.experimental import multihost_utils

    original = multihost_utils._live_devices
    if getattr(original, "_jax_accl_after", None) is not None:
        original._jax_accl_after = after
        return

    def live(client, devices):
        answer = original(client, devices)
        live._jax_accl_after({d.process_index: incarnation for d, incarnation in answer.items()})
        return answer

    live._jax_accl_after = after
    live.__doc__ = original.__doc__
    multihost_utils._live_devices = live


def hook_distributed_state(
    after_initialize=None, before_shutdown=None, after_shutdown=None
) -> None:
    """Runs after_initialize() once jax.distributed's state has initialized, and
    before_shutdown() before it shuts down (after_shutdown() after), on every path there: the public
    jax.distributed.initialize, jax._src.distributed.initialize (what launchers such as
    jax's own test_multiprocess call), the state's method itself, and again after a
    shutdown. Each hook wraps the State class's method once per name."""

    def wrap(name, before=None, after=None):
        original = getattr(_distributed.State, name)
        hooks = getattr(original, "_jax_accl_hooks", None)
        if hooks is None:
            hooks = {"before": [], "after": []}

            def method(self, *args, **kwargs):
                if self is _distributed.global_state:
                    for hook in hooks["before"]:
                        hook()
                result = original(self, *args, **kwargs)
                if self is _distributed.global_state:
                    for hook in hooks["after"]:
                        hook()
                return result

            method.__doc__ = original.__doc__
            method.__name__ = name
            method._jax_accl_hooks = hooks
            setattr(_distributed.State, name, method)
        for where, hook in (("before", before), ("after", after)):
            if hook is not None and hook not in hooks[where]:
                hooks[where].append(hook)

    if after_initialize is not None:
        wrap("initialize", after=after_initialize)
    if before_shutdown is not None or after_shutdown is not None:
        wrap("shutdown", before=before_shutdown, after=after_shutdown)


class _ServiceStoppingLate:
    """jax.distributed's coordination service, whose shutdown waits `grace_s` first."""

    def __init__(self, service, grace_s: float):
        self._service = service
        self._grace_s = grace_s

    def shutdown(self) -> None:
        time.sleep(self._grace_s)
        self._service.shutdown()

    def __getattr__(self, name):
        return getattr(self._service, name)


def delay_service_shutdown(grace_s: float) -> None:
    """In the process that holds jax.distributed's coordination service, its shutdown
    waits grace_s after this process's client has left. Why: the clients leave after the
    shutdown barrier, and an RPC of theirs still arriving while the service's gRPC server
    shuts down can abort the process (jaxlib 0.10.2: `Check failed: queue.Pop() ==
    nullptr` in ~RealRequestMatcher, under DistributedRuntimeService::Shutdown; met once
    in CI, on the coordinator of a 2-process bench). Call it before the state's shutdown."""
    state = _distributed.global_state
    if state.service is not None and not isinstance(state.service, _ServiceStoppingLate):
        state.service = _ServiceStoppingLate(state.service, grace_s)


def hook_loading(check) -> None:
    """check(devices, executable) whenever JAX loads a program to run it: `devices`, the
    program's devices (jax.Device, in its device assignment's order); `executable`,
    XLA's. Every program jax runs is loaded so (pxla.UnloadedMeshExecutable.load): one
    compiled by jax.jit or ahead of time (.lower().compile()), found in the persistent
    compilation cache, or deserialized (serialize_executable.deserialize_and_load, which
    compiles nothing). An exception it raises is the loading's. A callable it returns is
    called once the loaded program (jax's MeshExecutable, which holds XLA's executable
    and what runs it) is freed: nothing else can run that load of it then. Each check is
    hooked once (a wrapper per check, around the one before it)."""
    original = pxla.UnloadedMeshExecutable.load
    hooked = original
    while hooked is not None:
        if getattr(hooked, "_jax_accl_check", None) is check:
            return
        hooked = getattr(hooked, "_jax_accl_inner", None)

    def load(self):
        freed = check(self.device_list, self.xla_executable)
        try:
            loaded = original(self)
        except BaseException:
            if callable(freed):
                freed()  # never loaded, so never run: as good as freed
            raise
        if callable(freed):
            weakref.finalize(loaded, freed).atexit = False  # not at the interpreter's exit
        return loaded

    load._jax_accl_check = check
    load._jax_accl_inner = original
    pxla.UnloadedMeshExecutable.load = load


def hook_first_run(first_run, not_run=None) -> None:
    """first_run(XLA's executable) before each run of a loaded program that goes through
    jax's Python path (pxla.ExecuteReplicated), which every program's first run takes
    (a jitted function's first call, an AOT-compiled one's); later runs may take jax's
    C++ fast path instead. Where JAX then refuses that run before XLA launches anything
    (refused_before_launch), not_run(what first_run returned). Idempotent. Without
    ExecuteReplicated (another jax), never called."""
    runner = getattr(pxla, "ExecuteReplicated", None)
    if runner is None:
        return
    call = runner.__call__
    if getattr(call, "_jax_accl_first_run", None) is first_run:
        return

    def hooked(self, *args):
        token = first_run(self.xla_executable)
        try:
            return call(self, *args)
        except Exception as e:
            if not_run is not None and refused_before_launch(e):
                not_run(token)
            raise

    hooked._jax_accl_first_run, hooked.__wrapped__ = first_run, call
    runner.__call__ = hooked


# JAX's thread guard (jax.thread_guard, jaxlib's guard_lib.cc): a multi-process program
# run from a thread other than the guard's is refused by the executable's
# ExecuteSharded (py_executable.cc) before it launches anything, with this text (jaxlib
# 0.10.2 to 0.12.1: "A multi-process JAX operation was called from thread ...").
_THREAD_GUARD_REFUSAL = "This is not allowed because the thread guard was set in thread"


def refused_before_launch(error: BaseException) -> bool:
    """Whether `error`, raised by a program's run, is JAX's refusal of that run before
    XLA launched it on any device (so XLA made none of its communicators): its thread
    guard's. Any other error may come after the launch and is not taken for one."""
    return _THREAD_GUARD_REFUSAL in str(error)


def hook_custom_partitioning(wrap_partition) -> None:
    """Each jax.experimental.custom_partitioning call that JAX leaves to XLA's SPMD
    partitioner keeps its rule's `partition` in a callback record made while the
    program is lowered; it becomes wrap_partition(the module context being lowered,
    partition). XLA calls it at compile time, then JAX lowers the rule's lower_fn as a
    module of its own (mlir.lower_jaxpr_to_module, on the same thread) and XLA inlines
    it into the program. Idempotent."""
    from jax._src import custom_partitioning

    record = custom_partitioning._ShardingCallbackInfo
    init = record.__init__
    if getattr(init, "_jax_accl_hooked", False):
        return

    def hooked(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.partition = wrap_partition(self.module_context, self.partition)

    hooked._jax_accl_hooked, hooked.__wrapped__ = True, init
    record.__init__ = hooked


def compiled_text(executable) -> str:
    """The HLO text of a compiled executable's modules."""
    return "\n".join(module.to_string() for module in executable.hlo_modules())


def use_gloo_on_interface(interface: str) -> None:
    """Make JAX's CPU backend use gloo collectives bound to `interface` (jax picks the
    hostname's address otherwise, which network namespaces share). Call after
    jax.distributed.initialize() and before the first computation."""
    from jax._src import xla_bridge
    from jax._src.lib import _jax

    def factory():
        collectives = _jax.make_gloo_tcp_collectives(
            distributed_client=_distributed.global_state.client, interface=interface
        )
        return xla_bridge.make_cpu_client(collectives=collectives)

    xla_bridge.register_backend_factory("cpu", factory, priority=0, fail_quietly=False)


# --- partially manual shard_map (axis_names a strict subset of the mesh axes) ---

# The devices of the module a nested region is lowered in (device_assignment's answer
# there, whose mesh is abstract), while lower_fully_manual lowers it on this thread.
_nested_lowering = threading.local()


def is_partial_manual(ctx) -> bool:
    """True when lowering inside a shard_map that is manual over only some mesh axes."""
    axis_context = ctx.module_context.axis_context
    manual = getattr(axis_context, "manual_axes", frozenset())
    return bool(manual) and manual != frozenset(axis_context.mesh.axis_names)


def lower_fully_manual(ctx, fn, in_specs, out_specs, *args):
    """Lowers fn(*args) as a shard_map over the mesh axes not yet manual, inside a
    partially manual region (as jax.lax.axis_index does); its mesh is the region's."""
    from jax._src.shard_map import shard_map

    axis_context = ctx.module_context.axis_context
    mesh = axis_context.mesh.abstract_mesh.update_axis_types(
        {a: _mesh_lib.AxisType.Manual for a in axis_context.manual_axes}
    )
    nested = shard_map(fn, mesh=mesh, check_vma=False, in_specs=in_specs, out_specs=out_specs)
    try:
        devices = device_assignment(ctx)
    except NotImplementedError:
        devices = None
    before, _nested_lowering.devices = getattr(_nested_lowering, "devices", None), devices
    try:
        with _mesh_lib.use_abstract_mesh(mesh):
            lower = mlir.lower_fun(lambda *xs: list(nested(*xs)), multiple_results=True)
            return lower(ctx, *args)
    finally:
        _nested_lowering.devices = before


def spec_along_auto_axes(ctx, aval) -> PartitionSpec:
    """How `aval` is sharded along the mesh axes that are not manual, as its type says
    (explicit mesh axes; along automatic ones the type records nothing: replicated)."""
    manual = ctx.module_context.axis_context.manual_axes
    spec = getattr(getattr(aval, "sharding", None), "spec", None)
    if spec is None:
        return PartitionSpec()
    dims = []
    for entry in spec:
        names = entry if isinstance(entry, tuple) else (entry,) if entry is not None else ()
        names = tuple(n for n in names if n not in manual)
        dims.append(None if not names else names[0] if len(names) == 1 else names)
    return PartitionSpec(*dims)


def _shard_map_primitive():
    from jax._src import shard_map

    return shard_map.shard_map_p


shard_map_p = _shard_map_primitive()


def lowering_rule(primitive):
    """The lowering rule registered for `primitive` on every platform."""
    entry = mlir._lowerings[primitive]
    return getattr(entry, "rule", entry)


def parallel_primitive(name: str):
    """jax.lax's collective primitive `name`_p (jax._src.lax.parallel), or None."""
    return getattr(_parallel, f"{name}_p", None)


def wrap_cpu_lowering(primitive, wrap) -> bool:
    """Registers wrap(rule) as `primitive`'s CPU lowering, `rule` being the one JAX
    lowers it with on CPU now (CPU's own or the common one), inlined alike. False where
    it has none."""
    entry = mlir._platform_specific_lowerings["cpu"].get(primitive) or mlir._lowerings.get(
        primitive
    )
    if entry is None:
        return False
    rule, inline = getattr(entry, "rule", entry), getattr(entry, "inline", True)
    mlir.register_lowering(primitive, wrap(rule), platform="cpu", inline=inline)
    return True


def convert_hlo(ctx, x, aval, bitcast: bool):
    """x converted (or, with `bitcast`, reinterpreted) to `aval`'s element type."""
    target = mlir.aval_to_ir_type(ctx.module_context, aval)
    return hlo.bitcast_convert(target, x) if bitcast else hlo.convert(target, x)


def cpu_collectives_implementation() -> str | None:
    """JAX's jax_cpu_collectives_implementation ("gloo", "mpi" or None)."""
    from jax._src import config as jax_config

    return jax_config.cpu_collectives_implementation.value


# --- the making of XLA:CPU's client (jax_accl/cpu_threads.py) ---


def wrap_cpu_client_maker(wrapper) -> None:
    """Every CPU client JAX makes from now on is made by `wrapper(make, *args,
    **kwargs)`, `make` jaxlib's make_cpu_client (JAX's CPU backend factory and
    use_gloo_on_interface's both call it through xla_client). Idempotent."""
    from jax._src.lib import xla_client

    original = xla_client.make_cpu_client
    if getattr(original, "_jax_accl_wrapped", False):
        return

    def make_cpu_client(*args, **kwargs):
        return wrapper(original, *args, **kwargs)

    make_cpu_client._jax_accl_wrapped = True
    xla_client.make_cpu_client = make_cpu_client
