"""Programs that run on only some of the processes, refused at once under
JAX_ACCL_XLA_COLLECTIVES=1 when XLA inserted collectives into them.

XLA:CPU's MPI collectives make each communicator by ``MPI_Comm_split(MPI_COMM_WORLD,
color, key)`` where color is the group's first device and key its rank, called only
from the processes that run the program (those of its devices). MPI_Comm_split is
collective over the parent, MPI_COMM_WORLD: a real MPI would wait for the other
processes for ever, and jax_accl's split (an agreement of every process) would wait for
them until its timeout. (gloo, XLA's default, makes a communicator from the group's
devices and passes.) Nothing in the split tells which processes take part, so such a
program is refused when it is compiled, naming the processes and what to do, rather
than failing its first collective after JAX_ACCL_TIMEOUT_S."""

from __future__ import annotations

from jax_accl import _compat
from jax_accl.errors import AcclError
from jax_accl.hlo_text import xla_collectives_in


def install() -> None:
    _compat.hook_compilation(check)


def check(devices, executable) -> None:
    """Raises AcclError for a program whose devices span more than one process but not
    all of them, where its compiled HLO holds XLA collectives."""
    import jax

    count = jax.process_count()
    processes = sorted({d.process_index for d in getattr(devices, "flat", devices)})
    if count <= 1 or len(processes) <= 1 or len(processes) == count:
        return
    kinds = xla_collectives_in(_compat.compiled_text(executable))
    if not kinds:
        return
    raise AcclError(
        f"jax_accl: this program runs on processes {processes} of {count} and holds XLA "
        f"collectives ({', '.join(sorted(kinds))}). With JAX_ACCL_XLA_COLLECTIVES=1 XLA:CPU "
        "runs them through MPI, making their communicator by MPI_Comm_split of "
        "MPI_COMM_WORLD called from the participating processes only, which MPI's split "
        "(collective over every process) cannot complete, and which does not say who "
        "takes part: jax_accl refuses it now rather than failing after JAX_ACCL_TIMEOUT_S. "
        "Run it on a mesh over every process, or without JAX_ACCL_XLA_COLLECTIVES (gloo "
        "makes such communicators)"
    )
