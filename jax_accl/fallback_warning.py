"""The AcclWarning for a program that holds XLA all-reduces beside jax_accl's calls.

A jax_accl collective traced in a plain jax.shard_map (check_vma=True, routing off) runs
on jax_accl, but the gradient all-reduces autodiff makes there of replicated inputs (the
transposes of JAX's pvary) and the body's jax.lax collectives stay XLA's, silently. Which
of them a program holds is known once it is lowered: the collectives are noted when
traced (`note_traced`), and the next lowered module is looked at (`check_lowered`): where
it holds an XLA all-reduce, the warning (once per process) names what was traced and
points at the user's line that lowered the program (its first call), not at jax_accl's code.
A program whose collectives are all jax_accl's gets no warning."""

from __future__ import annotations

import os
import sys
import threading
import warnings

from jax_accl.errors import AcclWarning

_lock = threading.Lock()
# Per thread (a program is traced and lowered on one thread, so another thread's lowering
# neither takes nor clears its notes): jax_accl collectives traced in a plain shard_map,
# not yet warned of.
_notes = threading.local()
_warned = False


def _traced() -> list[str]:
    if not hasattr(_notes, "apis"):
        _notes.apis = []
    return _notes.apis


def note_traced(api: str) -> None:
    """A jax_accl collective (e.g. "jax_accl.pmean") traced in a plain jax.shard_map."""
    with _lock:
        if not _warned and api not in _traced():
            _traced().append(api)


def xla_all_reduces(module) -> int:
    """How many XLA all-reduces (stablehlo.all_reduce) the lowered MLIR module holds."""
    found = 0

    def visit(op) -> None:
        nonlocal found
        found += op.name == "stablehlo.all_reduce"
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    visit(inner.operation)

    for op in module.body.operations:
        visit(op.operation)
    return found


def check_lowered(module) -> None:
    """After each program is lowered (`module()` gives its MLIR module): where jax_accl
    collectives were traced in a plain shard_map since the last program, the warning if
    this one holds XLA all-reduces. A program is lowered right after it is traced, so
    the collectives noted are this program's (a gradient's forward call that autodiff
    dropped included)."""
    global _warned
    with _lock:
        if _warned or not _traced():
            return
        apis = list(_traced())
        _traced().clear()
        count = xla_all_reduces(module())
        if not count:
            return
        _warned = True
    warnings.warn(
        f"{', '.join(apis)} inside jax.shard_map (check_vma=True): this collective runs on "
        f"jax_accl, but the program also holds {count} XLA all-reduce(s), which stay XLA's: "
        "the gradient all-reduces autodiff makes of replicated inputs, or jax.lax "
        "collectives. Use jax_accl.shard_map (or @jax_accl.routed) to carry them too; "
        "jax_accl.collectives(step, *args) shows what a compiled step holds. (Warned once.)",
        AcclWarning,
        stacklevel=_user_stacklevel(),
    )


def reset() -> None:
    """Forgets what was traced and that the warning was given (tests)."""
    global _warned
    with _lock:
        _warned = False
        _traced().clear()


def _library_directories() -> tuple:
    import jax
    import jaxlib

    here = os.path.dirname(os.path.abspath(__file__))
    return tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (jax, jaxlib)) + (
        here + os.sep,
    )


def _user_stacklevel() -> int:
    """warnings.warn's stacklevel, from check_lowered's caller, of the innermost frame
    outside jax, jaxlib and jax_accl (and Python's functools and contextlib): the user's
    line that lowered the program."""
    libraries = _library_directories()
    plumbing = (os.sep + "functools.py", os.sep + "contextlib.py")
    frame, level = sys._getframe(2), 2  # level 2: check_lowered's caller
    while frame is not None:
        raw = frame.f_code.co_filename
        name = os.path.abspath(raw)
        if not (raw.startswith("<") or name.startswith(libraries) or name.endswith(plumbing)):
            return level
        frame, level = frame.f_back, level + 1
    return 2
