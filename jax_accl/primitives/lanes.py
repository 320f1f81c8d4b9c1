"""Every jax_accl call of a program has a lane of its own.

Calls are matched across ranks and processes by (op id, lane, call index): the lane is
the call's place among its module's jax_accl calls in lowering order (lowering.py), and
the call index counts the lane's calls on each device. That is only sound while no two
calls of one program share a lane: two independent calls with one lane run in either
order on each device, and across processes the call index would go to whichever
reached the communicator first, one process's first use reduced with another's
second, silently.

JAX lowers some things once and calls the lowered function from every place they are
used: a nested `jax.jit` (its own lowering cache), a `jax.checkpoint` / `remat` block
and any other equation whose lowering JAX caches. A helper holding a jax_accl call
used twice would then be two calls with one lane. So:

1. The module's lowering caches never hand back, nor keep, a lowering during which a
   jax_accl call was lowered (`LoweringCache`): each use of such a helper is lowered
   afresh, and its calls get lanes of their own. Lowerings without jax_accl calls are
   cached as before.
2. After lowering, `check_module` walks the module's call graph and refuses a program
   in which a jax_accl call is reached from more than one place, or two calls share an
   (op id, lane), naming the functions: whatever path of JAX's may cache a lowering in
   the future, a program whose calls the runtime could not tell apart never runs.

Some pieces of a program are lowered as modules of their own, whose lane counter starts
at 0 again, and joined to it later: a `jax.experimental.custom_partitioning` rule's
lower_fn is lowered when XLA's SPMD partitioner calls the rule, at compile time, and
XLA inlines it. So:

3. Each custom_partitioning call takes a lane index of its program when lowered (its
   site; a call lowered in a rule's module, the site of that module too), and the calls
   of its rule's module hash that site with their index: the same in every process
   (lowering order, not timing), distinct from the program's own lanes and from every
   other rule's. A custom_partitioning lowering is never cached, so each use is a site.
4. `check_compiled` reads every program JAX loads to run (the loading hook, so programs not
   lowered through jax_accl's functions too, e.g. a `jax.export`ed module called from
   another) and refuses one in which two jax_accl calls carry one lane, naming them,
   in every process that compiles it: whatever joined them.
"""

from __future__ import annotations

import threading
import zlib
from collections import defaultdict

from jax_accl.errors import AcclError
from jax_accl.hlo_text import accl_lanes_in
from jax_accl.names import COLLECTIVE_CODES

# Per thread: .calls, jax_accl calls lowered so far; .site, the site of the module being
# lowered (None: a program's own); .pending_site, a custom_partitioning rule's site, for
# the module JAX lowers next (the rule's lower_fn).
_lowered = threading.local()


def note_call_lowered() -> None:
    """Called by every jax_accl lowering rule, once per call it emits (and once per
    custom_partitioning call, which must not be cached either: _partition_at_site)."""
    _lowered.calls = calls_lowered() + 1


def calls_lowered() -> int:
    return getattr(_lowered, "calls", 0)


def _next_index(scratch: dict) -> int:
    """The next lane index of the module whose scratch (_compat.module_scratch) it is."""
    index = scratch.get("jax_accl_lanes", 0)
    scratch["jax_accl_lanes"] = index + 1
    return index


def next_lane(scratch: dict, groups) -> int:
    """A call's lane: its index among its module's jax_accl calls in lowering order, its
    groups and its module's site (none for a program's own module), hashed: the same in
    every process that lowers the same program (63 bits, an int64 attribute)."""
    note_call_lowered()
    index, site = _next_index(scratch), getattr(_lowered, "site", None)
    key = (index, [list(g) for g in groups])
    text = repr(key if site is None else (site, *key))
    return (zlib.crc32(text.encode()) << 31) ^ zlib.adler32(text.encode())


def _partition_at_site(module_context, partition):
    """A custom_partitioning call's rule (_compat.hook_custom_partitioning), given a site
    of the module lowering the call: the module JAX lowers from the rule's lower_fn,
    next on this thread once the rule returns, has its lanes hashed with the site."""
    from jax_accl import _compat as c

    note_call_lowered()  # not cached: each use its own site
    site = (getattr(_lowered, "site", None), _next_index(c.module_context_scratch(module_context)))

    def partition_at_site(*args, **kwargs):
        result = partition(*args, **kwargs)
        _lowered.pending_site = site
        return result

    return partition_at_site


class LoweringCache(dict):
    """One of a module context's lowering caches (JAX's per-equation cache and its
    cache of lowered functions), keeping only lowerings that emitted no jax_accl call.

    JAX looks a key up, lowers on a miss, then stores the result: a miss records how
    many jax_accl calls had been lowered, and a store after more were lowered is
    dropped, so the next use lowers again. `scratch` is jax_accl's own state for the
    module (its lane counter), which lives as long as the cache."""

    def __init__(self, entries=()):
        super().__init__(entries)
        self._misses: dict = {}
        self.scratch: dict = {}

    def _missed(self, key) -> None:
        self._misses[key] = calls_lowered()

    def get(self, key, default=None):
        if dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        self._missed(key)
        return default

    def __getitem__(self, key):
        if dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        self._missed(key)
        raise KeyError(key)

    def __contains__(self, key) -> bool:
        found = dict.__contains__(self, key)
        if not found:
            self._missed(key)
        return found

    def __setitem__(self, key, value) -> None:
        before = self._misses.pop(key, None)
        if before is not None and calls_lowered() != before:
            return  # it holds jax_accl calls: each use gets its own lowering and lanes
        dict.__setitem__(self, key, value)

    def setdefault(self, key, default=None):
        if dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        self[key] = default
        return default


# --- the check on the lowered module ---

_CALL_TARGETS = tuple(COLLECTIVE_CODES)  # every jax_accl FFI target


def _string(attribute) -> str:
    value = getattr(attribute, "value", None)
    return value if isinstance(value, str) else str(attribute).strip('"@')


def _accl_call(op):
    """(op id, lane, name) of a jax_accl custom call, else None."""
    if op.name != "stablehlo.custom_call":
        return None
    attributes = op.attributes
    if _string(attributes["call_target_name"]) not in _CALL_TARGETS:
        return None
    config = attributes["mhlo.backend_config"]
    return int(config["op_id"].value), int(config["lane"].value), _string(config["name"])


def _functions(module) -> dict:
    """Each function of the module: (the functions it calls, once per call site; its
    jax_accl calls)."""
    functions = {}
    for func in module.body.operations:
        if func.operation.name != "func.func":
            continue
        callees, calls = [], []

        def visit(op, callees=callees, calls=calls):
            if op.name == "func.call":
                callees.append(_string(op.attributes["callee"]))
            else:
                call = _accl_call(op)
                if call is not None:
                    calls.append(call)
            for region in op.regions:
                for block in region.blocks:
                    for inner in block.operations:
                        visit(inner.operation)

        visit(func.operation)
        functions[_string(func.operation.attributes["sym_name"])] = (callees, calls)
    return functions


def check_module(module, program: str) -> None:
    """Raises AcclError where the lowered `module` holds jax_accl calls the runtime
    could not tell apart: one reached from several places (a function with jax_accl
    calls called more than once), or two with the same op id and lane."""
    functions = _functions(module)
    if "main" not in functions:
        return
    callers: dict = defaultdict(list)  # function -> its callers, once per call site
    for caller, (callees, _) in functions.items():
        for callee in callees:
            callers[callee].append(caller)
    uses: dict = {}  # function -> how many places in the program reach it

    def count(name: str, visiting: frozenset) -> int:
        if name not in uses:
            if name == "main":
                uses[name] = 1
            else:  # lowered programs do not recurse; a cycle counts once
                uses[name] = sum(
                    count(c, visiting | {name}) for c in callers[name] if c not in visiting
                )
        return uses[name]

    seen: dict = {}
    for function, (_, calls) in functions.items():
        for op_id, lane, name in calls:
            if count(function, frozenset()) > 1:
                raise AcclError(
                    f"jax_accl: in program {program!r}, the {name} call is in function "
                    f"{function!r}, which JAX lowered once and calls from {uses[function]} "
                    f"places: its uses could not be told apart across ranks. Lower each use "
                    f"on its own (e.g. jax.jit(..., inline=True) for that helper) and report "
                    f"this to jax_accl"
                )
            if (op_id, lane) in seen:
                raise AcclError(
                    f"jax_accl: in program {program!r}, the {name} calls in functions "
                    f"{seen[op_id, lane]!r} and {function!r} share op id {op_id} and lane "
                    f"{lane}: the runtime could not tell them apart; report this to jax_accl"
                )
            seen[op_id, lane] = function


def _checked(lower):
    """JAX's module lowering, followed by check_module wherever jax_accl calls were
    lowered in it and operand_origin's pass (in place only where the operand may be
    overwritten) (and, after jax_accl collectives were traced in a plain shard_map, the
    warning of XLA all-reduces beside them)."""
    from jax_accl import _compat as c
    from jax_accl import fallback_warning

    def lower_checked(module_name, *args, **kwargs):
        before = calls_lowered()
        outer, _lowered.site = getattr(_lowered, "site", None), _take_pending_site()
        try:
            result = lower(module_name, *args, **kwargs)
        finally:
            _lowered.site = outer
        if calls_lowered() != before:
            check_module(c.lowered_module(result), module_name)
            _unalias_kept_arguments(c.lowered_module(result))
        fallback_warning.check_lowered(lambda: c.lowered_module(result))
        return result

    return lower_checked


def _unalias_kept_arguments(module) -> None:
    """operand_origin's pass, a speed-up only (a kept alias makes XLA copy the argument,
    which is as correct): where the MLIR bindings of a jax version it does not know make
    it fail, the program keeps its aliases and lowers, with one warning."""
    from jax_accl import log
    from jax_accl.primitives import operand_origin

    try:
        operand_origin.unalias_kept_arguments(module)
    except Exception as e:  # noqa: BLE001 - any failure of the pass leaves aliases kept
        if not getattr(_unalias_kept_arguments, "warned", False):
            _unalias_kept_arguments.warned = True
            log.logger.warning(
                "jax_accl: calls on a program's arguments keep their in-place alias (XLA "
                "copies each argument first): reading the lowered module failed: %r",
                e,
            )


def _take_pending_site():
    site = getattr(_lowered, "pending_site", None)
    _lowered.pending_site = None
    return site


# --- the check on the compiled program ---


def spans_processes(devices) -> bool:
    """Whether a program's devices live in more than one process: only there do two calls
    of one lane share anything (the group's channels across processes); in one process
    each call has a group of its own, whatever its lane."""
    return len({d.process_index for d in devices}) > 1


def check_compiled(devices, executable) -> None:
    """Raises AcclError where two jax_accl calls of a compiled program that spans
    processes carry one lane (the loading hook's check: once per program loaded, never
    per call)."""
    if not spans_processes(devices):
        return
    from jax_accl import _compat as c

    text = c.compiled_text(executable)
    if "accl_" not in text:
        return
    seen: dict = {}
    for lane, call in accl_lanes_in(text):
        if lane in seen:
            program = text.split(",", 1)[0].removeprefix("HloModule ").strip()
            raise AcclError(
                f"jax_accl: in compiled program {program!r}, the calls {seen[lane]} and "
                f"{call} carry one lane ({lane}): the runtime could not tell them apart "
                f"(across processes one's launch would be paired with the other's), so the "
                f"program is refused. Was a piece of it lowered apart and joined by XLA? "
                f"Report this to jax_accl"
            )
        seen[lane] = call


def install() -> None:
    """Hooks JAX's module contexts, module lowering, custom_partitioning's rules and
    compilation (idempotent)."""
    from jax_accl import _compat as c

    c.hook_lowering_caches(LoweringCache)
    c.hook_module_lowering(_checked)
    c.hook_custom_partitioning(_partition_at_site)
    c.hook_loading(check_compiled)
