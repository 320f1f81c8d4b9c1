"""jax_accl's interpreter start-up hook: XLA's collectives on jax_accl by the environment
alone (``JAX_ACCL_XLA_COLLECTIVES=1``), in any Python process, even one that never
imports jax_accl (a launcher's re-executed worker, a script run as is).

Installed with the package as ``jax_accl_xla_collectives.pth`` in site-packages, whose
one line Python's ``site`` runs at every start-up: it reads the variable and, only when
it is ``1`` (or ``true``), calls ``install()`` here; otherwise it does nothing more.

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

import importlib.abc
import importlib.util
import os
import sys


def library_path() -> str | None:
    """jax_accl's MPI library, found without importing the package."""
    spec = importlib.util.find_spec("jax_accl")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(list(spec.submodule_search_locations)[0], "libjax_accl_mpi.so")


class _ThenJaxAccl(importlib.abc.Loader):
    """jax's own loader, and jax_accl imported once jax's module has run."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        try:
            self.loader.exec_module(module)
        finally:
            module.__loader__ = self.loader
            if module.__spec__ is not None:
                module.__spec__.loader = self.loader
        import jax_accl  # noqa: F401


class _AtJaxImport(importlib.abc.MetaPathFinder):
    """Finds jax as the other finders do, with _ThenJaxAccl as its loader; once."""

    def find_spec(self, name, path=None, target=None):
        if name != "jax":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenJaxAccl(spec.loader)
        return spec


def install() -> None:
    if "jax" in sys.modules:  # imported by another start-up hook: jax_accl says what to do
        return
    library = library_path()
    if library is not None:
        os.environ["MPITRAMPOLINE_LIB"] = library
    if not any(isinstance(f, _AtJaxImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AtJaxImport())
