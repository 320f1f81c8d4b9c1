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
"""

from __future__ import annotations

import threading
from collections import defaultdict

from jax_accl.errors import AcclError

_lowered = threading.local()  # .calls: jax_accl calls lowered on this thread so far


def note_call_lowered() -> None:
    """Called by every jax_accl lowering rule, once per call it emits."""
    _lowered.calls = calls_lowered() + 1


def calls_lowered() -> int:
    return getattr(_lowered, "calls", 0)


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

_CALL_TARGETS = (
    "accl_allreduce",
    "accl_reduce_scatter",
    "accl_all_gather",
    "accl_ppermute",
    "accl_all_to_all",
    "accl_ragged_all_to_all",
)


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
    lowered in it (and, after jax_accl collectives were traced in a plain shard_map, the
    warning of XLA all-reduces beside them)."""
    from jax_accl import _compat as c
    from jax_accl import fallback_warning

    def lower_checked(module_name, *args, **kwargs):
        before = calls_lowered()
        result = lower(module_name, *args, **kwargs)
        if calls_lowered() != before:
            check_module(c.lowered_module(result), module_name)
        fallback_warning.check_lowered(lambda: c.lowered_module(result))
        return result

    return lower_checked


def install() -> None:
    """Hooks JAX's module contexts and module lowering (idempotent)."""
    from jax_accl import _compat as c

    c.hook_lowering_caches(LoweringCache)
    c.hook_module_lowering(_checked)
