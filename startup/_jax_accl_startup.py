"""jax_accl's interpreter start-up hook: XLA's collectives on jax_accl by the environment
alone (``JAX_ACCL_XLA_COLLECTIVES=1``), in any Python process, even one that never
imports jax_accl (a launcher's re-executed worker, a script run as is).

Installed with the package as ``jax_accl_xla_collectives.pth`` in site-packages, whose
one line Python's ``site`` runs at every start-up: where no ``JAX_ACCL_*`` variable is set
it does nothing more; otherwise it calls ``at_start_up()`` here, which warns of each
``JAX_ACCL_*`` variable that is no knob (naming the closest), calls ``install()`` where
the variable is ``1`` (or ``true``), drops jax_accl's MPI library inherited from a parent
with ``1`` where it is ``0`` (or ``false``, ``release()``), and for any other value makes
``import jax`` raise, naming the values accepted.

``install()`` does two things, importing neither jax nor jax_accl:

1. points ``MPITRAMPOLINE_LIB`` at jax_accl's MPI library, which jaxlib's MPItrampoline
   loads when jax is imported (too late to change afterwards, which is why this is a
   start-up hook: JAX's ``jax_plugins`` entry points are discovered only when JAX makes
   its backends, after jaxlib is loaded);
2. arranges that the first ``import jax`` imports jax_accl as soon as jax itself is
   imported, which selects XLA:CPU's MPI collectives and makes jax.distributed's
   initialization start jax_accl's side (jax_accl/xla_collectives.py).

An error there (jax_accl's library missing, say) is raised by ``import jax``, naming it.
"""

from __future__ import annotations

import importlib.util
import os
import sys


def knobs():
    """jax_accl/config.py, loaded alone (importing the package would import jax)."""
    if "_jax_accl_config" in sys.modules:
        return sys.modules["_jax_accl_config"]
    spec = importlib.util.find_spec("jax_accl")
    path = os.path.join(list(spec.submodule_search_locations)[0], "config.py")
    spec = importlib.util.spec_from_file_location("_jax_accl_config", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses looks its classes' module up
    spec.loader.exec_module(module)
    return module


# Whether at_start_up() warned of the misspelt variables (jax_accl's import then does not).
warned = False


def at_start_up() -> None:
    """From the .pth line, where some JAX_ACCL_* variable is set (once: site may read
    the same site-packages twice, as a virtual environment's and as the base's)."""
    global warned
    if warned or importlib.util.find_spec("jax_accl") is None:
        return  # done, or jax_accl uninstalled and its hook left behind
    try:
        config = knobs()
        misspelt = config.misspelt()
    except Exception as e:  # a config.py of another version: one line, never a traceback
        misspelt, config = [f"jax_accl's start-up hook could not read its knobs: {e}"], None
    if sys.stderr is not None:  # (closed: never on stdout, which may be a program's data)
        for line in misspelt:
            print(f"warning: {line}", file=sys.stderr)
    warned = True
    if config is None:
        return
    try:
        on = config.value("JAX_ACCL_XLA_COLLECTIVES")
    except ValueError as e:
        _after("jax", _refuse(e))
        return
    if on:
        install()
    elif os.environ.get("JAX_ACCL_XLA_COLLECTIVES", "").strip() and os.environ.get(
        "MPITRAMPOLINE_LIB", ""
    ).endswith("/libjax_accl_mpi.so"):
        release()  # set to 0 (not merely unset: the hook now runs for any JAX_ACCL_* knob)


def _refuse(error: ValueError):
    """What `import jax` then raises: the variable's value cannot be read."""

    def then(_jax):
        raise ValueError(f"jax_accl: {error}") from None

    return then


def requested() -> bool:
    """JAX_ACCL_XLA_COLLECTIVES=1 (or true), as the .pth line reads it."""
    return os.environ.get("JAX_ACCL_XLA_COLLECTIVES", "").strip().lower() in ("1", "true")


def library_path() -> str | None:
    """jax_accl's MPI library, found without importing the package."""
    spec = importlib.util.find_spec("jax_accl")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(list(spec.submodule_search_locations)[0], "libjax_accl_mpi.so")


# The import system takes any object with these methods (PEP 451): the importlib.abc base
# classes are not imported, which cost every Python process of the environment 17 ms at
# start-up (this hook runs wherever a JAX_ACCL_* variable is set).
class _ThenRun:
    """A module's own loader, and then(module) once the module has run."""

    def __init__(self, loader, then):
        self.loader, self.then = loader, then

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        try:
            self.loader.exec_module(module)
        finally:
            module.__loader__ = self.loader
            if module.__spec__ is not None:
                module.__spec__.loader = self.loader
        self.then(module)


class _AfterImport:
    """Finds module `name` as the other finders do, and runs then(module) once it has
    been imported; once."""

    def __init__(self, name, then):
        self.name, self.then = name, then
        self.searching = False

    def find_spec(self, name, path=None, target=None):
        # Stays on sys.meta_path until the module runs: a mere lookup (a library asking
        # whether jax is installed) does not disarm it.
        if name != self.name or self.searching:
            return None
        self.searching = True  # the other finders', below
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.searching = False
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenRun(spec.loader, self._imported)
        return spec

    def _imported(self, module) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        self.then(module)


def _after(name: str, then) -> None:
    if name in sys.modules:
        then(sys.modules[name])
    else:
        sys.meta_path.insert(0, _AfterImport(name, then))


def _import_jax_accl(_jax) -> None:
    import jax_accl  # noqa: F401


installed = False


def install() -> None:
    """From the .pth file, at start-up: before jax's import."""
    global installed
    if installed or "jax" in sys.modules:  # jax_accl says what to do where jax came first
        return
    installed = True
    library = library_path()
    if library is not None:
        os.environ["MPITRAMPOLINE_LIB"] = library
    # Inherited by child processes: one whose start-up skips this hook still runs XLA's
    # collectives through the MPI library (which starts jax_accl, after_initialize) or
    # fails naming why, never silently over gloo.
    os.environ["JAX_CPU_COLLECTIVES_IMPLEMENTATION"] = "mpi"
    _after("jax", _import_jax_accl)


def release() -> None:
    """From the .pth file, where the variable is 0 but this process inherited the MPI
    library jax_accl set for its parent: jaxlib gets none (gloo, JAX's default), as the
    variable says; a jax_cpu_collectives_implementation of jax_accl's setting goes too."""
    os.environ.pop("MPITRAMPOLINE_LIB", None)
    if os.environ.get("JAX_CPU_COLLECTIVES_IMPLEMENTATION") == "mpi":
        os.environ.pop("JAX_CPU_COLLECTIVES_IMPLEMENTATION")


def after_initialize() -> None:
    """From jax_accl's MPI library as jaxlib loads it, in the middle of ``import jax``,
    in a process with JAX_ACCL_XLA_COLLECTIVES=1 where neither this hook's install() nor
    jax_accl ran: a worker a launcher re-executed with another interpreter, as
    ``/proc/self/exe`` runs a virtual environment's base Python, whose site does not read
    the environment's .pth files (its site-packages come on PYTHONPATH). jax_accl is
    imported once jax.distributed's state has initialized, and starts its side then."""
    global installed
    if installed or not requested():
        return
    installed = True
    _after("jax._src.distributed", _import_jax_accl_after_initialize)


def _import_jax_accl_after_initialize(distributed) -> None:
    original = distributed.State.initialize

    def initialize(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        if distributed.State.initialize is initialize:  # not wrapped since (jax_accl's own)
            distributed.State.initialize = original  # jax_accl hooks it its own way
        import jax_accl  # noqa: F401  (jax.distributed is up: starts jax_accl's side)

        return result

    initialize.__doc__ = original.__doc__
    distributed.State.initialize = initialize
