"""jax_accl as XLA:CPU's collectives backend (``JAX_ACCL_XLA_COLLECTIVES=1``).

With ``jax_cpu_collectives_implementation='mpi'``, XLA:CPU runs every collective of a
multi-process program (the all-reduces, all-gathers, all-to-alls and
collective-permutes its SPMD partitioner inserts into a ``jax.jit`` program) through
MPI, which jaxlib reaches through MPItrampoline, linked into ``libjax_common.so``: at
``import jax`` it loads the library named by ``MPITRAMPOLINE_LIB``. jax_accl's
``libjax_accl_mpi.so`` (``xla_ffi/mpiabi/``) exports that ABI and runs the calls on
jax_accl's runtime: hierarchical, every rail, shared memory within a host.

Turned on by ``JAX_ACCL_XLA_COLLECTIVES=1`` in the environment: jax_accl's start-up hook
(``startup/_jax_accl_startup.py``, installed as a .pth file) prepares before jax's import
and imports jax_accl with jax, or jax_accl's MPI library does where the hook could not
run (``xla_ffi/mpiabi/python_start.cc``); importing jax_accl first does it as well
(``prepare``). jax.distributed's initialization, by whichever path, then starts jax_accl's
side (``finish``, ``start_our_side``). No mpirun: ranks and the bootstrap are
jax.distributed's. docs/xla_collectives.md says how, and lists every limit.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

from jax_accl import config
from jax_accl.errors import AcclError

LIBRARY = Path(__file__).with_name("libjax_accl_mpi.so")
# jaxlib versions whose MPIABI names CI checks against the library's
# (tests/tools/test_mpiabi_names.py); any other is checked at enable time.
VERIFIED_JAXLIB = ("0.10.2", "0.12.0", "0.12.0.1", "0.12.1")

_prepared = False


def requested() -> bool:
    return bool(config.value("JAX_ACCL_XLA_COLLECTIVES"))


def enabled() -> bool:
    """Whether this process's XLA:CPU collectives run on jax_accl."""
    return _prepared


def prepare() -> None:
    """Before jax's import: points jaxlib's MPItrampoline at jax_accl's library."""
    global _prepared
    if not requested() or _prepared:
        return
    ours = str(LIBRARY)
    if ("jax" in sys.modules or "jaxlib" in sys.modules) and config.environment(
        "MPITRAMPOLINE_LIB"
    ) != ours:
        raise AcclError(
            "jax_accl: JAX_ACCL_XLA_COLLECTIVES=1, but jax was imported before jax_accl, "
            "and jaxlib reads the MPI library it loads when it is imported. Import jax_accl "
            "first, or run the script as `python -m jax_accl.run script.py ...`"
        )
    if not LIBRARY.exists():
        raise AcclError(f"jax_accl: {LIBRARY} is missing; reinstall jax_accl")
    check_jaxlib(ours)
    config.set_environment("MPITRAMPOLINE_LIB", ours)
    # For child processes too (inherited): one that skips jax_accl's start-up hook still
    # runs XLA's collectives through the library, which then imports jax_accl
    # (xla_ffi/mpiabi/python_start.cc), or fails naming why; never silently gloo.
    config.set_environment("JAX_CPU_COLLECTIVES_IMPLEMENTATION", "mpi")
    _prepared = True


def finish() -> None:
    """After jax's import: selects XLA:CPU's MPI collectives and makes jax.distributed's
    initialization, by whichever path (_compat.hook_distributed_state), start jax_accl's
    side too."""
    if not _prepared:
        return
    import jax

    from jax_accl import _compat, half_collectives, xla_subsets

    jax.config.update("jax_cpu_collectives_implementation", "mpi")
    half_collectives.install(enabled)  # float16 shard_map/pmap collectives as uint16/float32
    _compat.hook_distributed_state(after_initialize=start_our_side)
    xla_subsets.install(LIBRARY)
    if _compat.distributed_client() is not None:  # initialized before jax_accl's import
        start_our_side()


def start_our_side() -> None:
    """jax_accl's side of the job, once jax.distributed is up: the job announced to the
    MPI library (XLA's MPI_Init, when JAX makes its CPU backend, asks MPI_COMM_WORLD's
    rank and size) and the process table made. A process may have several CPU devices:
    each device's thread is then a rank of its own in the library's communicators
    (docs/xla_collectives.md, "Several devices per process")."""
    from jax_accl import _accl, _compat, distributed, xla_split_places

    xla_split_places.new_job()
    state = _compat.distributed_state()
    _accl.world_announce_job(state.process_id, state.num_processes, config.current().timeout_s)
    if distributed.rejoining():  # it starts with the live processes (jax_accl.membership)
        return
    distributed.ensure_started()


def jaxlib_version() -> str:
    try:
        return importlib.metadata.version("jaxlib")
    except importlib.metadata.PackageNotFoundError:
        return "(unknown)"


def jaxlib_binary() -> Path:
    spec = importlib.util.find_spec("jaxlib")  # without importing it
    if spec is None or not spec.submodule_search_locations:
        raise AcclError("jax_accl: jaxlib is not installed")
    return Path(list(spec.submodule_search_locations)[0]) / "libjax_common.so"


def names_jaxlib_looks_up(binary: Path | None = None) -> set[str]:
    """The MPIABI_* names jaxlib's MPItrampoline looks up (strings in libjax_common.so)."""
    data = (binary or jaxlib_binary()).read_bytes()
    return {m.decode() for m in re.findall(rb"(?<![\w])(MPIX?ABI_[A-Za-z0-9_]+)\x00", data)}


def check_jaxlib(library: str, binary: Path | None = None, version: str | None = None) -> None:
    """Raises AcclError when the jaxlib installed (or `binary` of `version`) would not
    load `library`: its MPItrampoline ends the process at import (exit(1)) when the
    library's MPI ABI version is not one it accepts or a name it looks up is missing. A
    child process loads the binary with the library, as `import jax` will, and the
    error names the version and what MPItrampoline said. A verified jaxlib is taken as
    is (CI checks its names, tests/tools/test_mpiabi_names.py)."""
    version = version or jaxlib_version()
    if version in VERIFIED_JAXLIB:
        return
    binary = binary or jaxlib_binary()
    load = "import ctypes, sys; ctypes.CDLL(sys.argv[1])"
    env = config.environment_with(MPITRAMPOLINE_LIB=library, MPITRAMPOLINE_VERBOSE="1")
    try:
        done = subprocess.run(
            [sys.executable, "-c", load, str(binary)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    except subprocess.TimeoutExpired:
        raise AcclError(
            f"jax_accl: loading jaxlib {version}'s {binary.name} with jax_accl's MPI library "
            "took over 120 s in a child process; JAX_ACCL_XLA_COLLECTIVES=1 is verified with "
            f"jaxlib {', '.join(VERIFIED_JAXLIB)}"
        ) from None
    if done.returncode == 0:
        return
    lib = ctypes.CDLL(library)
    abi = ".".join(
        str(ctypes.c_int.in_dll(lib, f"mpiabi_version_{part}").value)
        for part in ("major", "minor", "patch")
    )
    missing = sorted(n for n in names_jaxlib_looks_up(binary) if not hasattr(lib, n))
    shown = ", ".join(missing[:8]) + (", ..." if len(missing) > 8 else "")
    lines = (done.stdout + done.stderr).splitlines()
    said = [line for line in lines if "MPItrampoline" in line] or lines
    how = (
        f"killed by signal {-done.returncode}"
        if done.returncode < 0
        else f"exit status {done.returncode}"
    )
    raise AcclError(
        f"jax_accl: jaxlib {version} does not load jax_accl's MPI library (MPI ABI {abi}): "
        f"a process that loads it with the library ended ({how}), as this one would at "
        "import. "
        + (
            f"It looks up names the library lacks: {shown} ({len(missing)} in all). "
            if missing
            else ""
        )
        + ("It said: " + " | ".join(said[-3:]) + ". " if said else "")
        + f"JAX_ACCL_XLA_COLLECTIVES=1 is verified with jaxlib {', '.join(VERIFIED_JAXLIB)}"
    )
