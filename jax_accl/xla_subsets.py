"""The groups XLA:CPU's MPI collectives split MPI_COMM_WORLD into, read from every
compiled multi-process program under JAX_ACCL_XLA_COLLECTIVES=1 and told to jax_accl's
MPI library, so that a program on only some of the processes runs.

XLA:CPU's MPI collectives make each communicator by ``MPI_Comm_split(MPI_COMM_WORLD,
color, key)`` where color is the group's first device and key the device's place in it,
called only from the processes that run the program (those of its devices): nothing in
the call says which processes those are, and MPI's split is collective over the parent.
jax_accl's library splits among every process for a program on every process; for a
group of a program on some processes it splits among that group's processes only (an
agreement of those, within JAX_ACCL_TIMEOUT_S), knowing the group from here
(xla_ffi/mpiabi/communicators.cc, parent_among). A program on some processes whose
groups cannot be read is refused when compiled, naming the processes and what to do,
rather than failing its first collective after JAX_ACCL_TIMEOUT_S. With several CPU
devices per process each device's thread splits for itself, and the library takes the
asking device from these groups too: a program of such a process is told even when it
runs on that process alone, and one whose groups cannot be read is refused at once. So
is one whose groups, with those of the programs loaded before it, put two of one
process's devices at one place of groups that start with the same device where the
library could not tell which asks (xla_split_places.py): judged at loading, not at the
split."""

from __future__ import annotations

import ctypes
import re

import numpy as np

from jax_accl import _compat, xla_split_places
from jax_accl.errors import AcclError
from jax_accl.hlo_text import KINDS, xla_collectives_in
from jax_accl.xla_call_signature import signature

_library_path: str | None = None  # jax_accl's MPI library (xla_collectives.LIBRARY)
_library = None


def install(library) -> None:
    global _library_path
    _library_path = str(library)
    _compat.hook_loading(check)
    _compat.hook_first_run(xla_split_places.first_run, xla_split_places.not_run)


def check(devices, executable):
    """Tells the MPI library the groups of a program whose devices span several
    processes and whose compiled HLO holds XLA collectives, as jax loads it (compiled or
    deserialized: _compat.hook_loading); raises AcclError for one on only some of the
    processes whose groups cannot be read. Returns what to call once the loaded program
    is freed (its groups forgotten where it never ran: xla_split_places), or None."""
    import jax

    count = jax.process_count()
    flat = [] if devices is None else list(getattr(devices, "flat", devices))
    processes = sorted({d.process_index for d in flat})
    # A program on one process's several devices splits too (XLA:CPU runs every
    # collective of a job's client through MPI, a job of one process included).
    if len(flat) <= 1:
        return
    text = _compat.compiled_text(executable)
    kinds = xla_collectives_in(text)
    if not kinds:
        return
    subset = len(processes) < count
    ids = [d.id for d in flat]
    groups = groups_in(text, ids)
    several = jax.local_device_count() > 1
    if groups is None:
        if several:
            raise AcclError(
                f"jax_accl: this program holds XLA collectives ({', '.join(sorted(kinds))}) "
                "whose groups jax_accl cannot read from its HLO, and this process has "
                f"{jax.local_device_count()} CPU devices. With JAX_ACCL_XLA_COLLECTIVES=1 "
                "each device's thread makes its own MPI_Comm_split of MPI_COMM_WORLD, whose "
                "arguments (the group's first device, the device's place) do not say which "
                "device asks: jax_accl takes it from the groups it reads, and refuses this "
                "program now rather than failing its first collective. Run it with one CPU "
                "device per process, or without JAX_ACCL_XLA_COLLECTIVES (gloo)"
            )
        if not subset:  # split among every process, as every process runs the program;
            # told, so that no split of its devices is taken for another program's group
            note_groups(ids, [], subset=False, unknown=True)
            return
        raise AcclError(
            f"jax_accl: this program runs on processes {processes} of {count} and holds "
            f"XLA collectives ({', '.join(sorted(kinds))}) whose groups jax_accl cannot "
            "read from its HLO. With JAX_ACCL_XLA_COLLECTIVES=1 XLA:CPU runs them through "
            "MPI, making their communicator by MPI_Comm_split of MPI_COMM_WORLD called "
            "from the participating processes only, which does not say who takes part: "
            "jax_accl refuses it now rather than failing after JAX_ACCL_TIMEOUT_S. Run it "
            "on a mesh over every process, or without JAX_ACCL_XLA_COLLECTIVES (gloo makes "
            "such communicators)"
        )
    process_of = {d.id: d.process_index for d in flat}
    ordered = in_order(text)
    collectives = collectives_by_group(text, ids)

    def tell() -> None:
        note_groups(ids, groups, subset, ordered, collectives=collectives)

    def untell() -> None:
        forget_groups(ids, groups, subset, ordered, collectives=collectives)

    return xla_split_places.admit(
        executable, groups, process_of, ordered, collectives, tell=tell, untell=untell
    )


def _loaded():
    global _library
    if _library is None:
        _library = ctypes.CDLL(_library_path)
        values = ctypes.POINTER(ctypes.c_int64)
        _library.jax_accl_mpi_note_groups.argtypes = [values, ctypes.c_int64]
        _library.jax_accl_mpi_forget_groups.argtypes = [values, ctypes.c_int64]
        _library.jax_accl_mpi_held_groups.argtypes = [values, ctypes.c_int64]
        _library.jax_accl_mpi_held_groups.restype = ctypes.c_int64
        _library.jax_accl_mpi_split_before_rejoin.argtypes = [values, ctypes.c_int64]
    return _library


def in_use() -> bool:
    """Whether XLA's collectives run through jax_accl's MPI library here."""
    return _library_path is not None


def held_groups() -> list[list[int]]:
    """The groups of the communicators across processes XLA holds in this process, each
    [lane, devices in rank order...] (a rejoin: jax_accl.membership)."""
    library = _loaded()
    # Each call is one snapshot, under the library's lock; XLA's threads may split or
    # free communicators between the two: a snapshot that no longer fits is not written,
    # and is asked for again with its size.
    size = library.jax_accl_mpi_held_groups(None, 0)
    for _ in range(100):
        array = (ctypes.c_int64 * size)()
        needed = library.jax_accl_mpi_held_groups(array, size)
        if needed <= size:
            break
        size = needed
    else:
        raise AcclError("jax_accl: the MPI library's held groups kept changing; try again")
    data, groups, at = list(array[:needed]), [], 1
    for _ in range(data[0]):
        n = data[at]
        groups.append(data[at + 1 : at + 2 + n])
        at += 2 + n
    return groups


def split_before_rejoin(groups: list[list[int]]) -> None:
    """Tells the MPI library of a process started again the groups ([lane, devices...])
    that the processes that stayed split before it joined them: XLA there never splits
    them again, so its split of one is made without them (the same devices and lane)."""
    data = [len(groups)]
    for lane, *devices in groups:
        data += [len(devices), lane, *devices]
    _tell(_loaded().jax_accl_mpi_split_before_rejoin, data, "refused the groups split before")


def note_groups(
    program: list[int],
    groups: list[list[int]],
    subset: bool,
    ordered: bool = True,
    unknown: bool = False,
    collectives: dict | None = None,
) -> None:
    """Tells jax_accl's MPI library (loaded by jaxlib) a program's groups; `ordered`:
    they are in the order the program runs its collectives (see in_order); `unknown`:
    its groups could not be read (any group of its devices may be one); `collectives`:
    collectives_by_group's, told as each group's signatures (flag 8), from which the
    library binds a provisional communicator to its group at its first call."""
    data = _program_data(program, groups, subset, ordered, unknown, collectives)
    _tell(_loaded().jax_accl_mpi_note_groups, data, "refused a program's groups")


def forget_groups(
    program: list[int],
    groups: list[list[int]],
    subset: bool,
    ordered: bool = True,
    unknown: bool = False,
    collectives: dict | None = None,
) -> None:
    """Tells jax_accl's MPI library that a program whose groups note_groups told (the
    same arguments) will not run (xla_split_places: never run, and refused by JAX's
    thread guard, or freed): once no loaded program of those groups is left, a split
    they fit is not refused for them."""
    data = _program_data(program, groups, subset, ordered, unknown, collectives)
    _tell(_loaded().jax_accl_mpi_forget_groups, data, "refused to forget a program")


def _tell(entry, data: list[int], refusal: str) -> None:
    """Calls one of the MPI library's entries with `data` as its int64 array."""
    array = (ctypes.c_int64 * len(data))(*data)
    if entry(array, len(data)) != 0:
        raise AcclError(f"jax_accl: the MPI library {refusal} (see stderr)")


def _program_data(program, groups, subset, ordered, unknown, collectives) -> list[int]:
    """note_groups' arguments in the library's layout (communicators.h, note_groups)."""
    flags = int(subset) | (0 if ordered else 2) | (4 if unknown else 0)
    flags |= 8 if collectives else 0
    data = [flags, len(program), *program, len(groups)]
    for g in groups:
        data += [len(g), *g]
        if collectives:
            calls = sorted({signature(*c) for c in collectives.get(tuple(g), [])})
            data += [len(calls)] + [v for call in calls for v in call]
    return data


def groups_in(text: str, devices: list[int]) -> list[list[int]] | None:
    """The device groups (global device ids, in XLA's rank order) of every XLA
    collective in a compiled module's HLO `text`, whose logical devices are `devices`
    (jax's device assignment, replica-major); None where a collective's cannot be read."""
    header = re.search(r"^HloModule .*$", text, re.M)
    replicas = _header_int(header, "replica_count")
    partitions = _header_int(header, "num_partitions")
    if replicas * partitions != len(devices):
        return None
    found: list[list[int]] = []
    for match in re.finditer(_COLLECTIVE, text, re.M):
        kind, rest = match.group(1), match.group(2)
        logical = _logical_groups(kind, rest, replicas, partitions)
        if logical is None:
            return None
        for group in logical:
            if any(not 0 <= i < len(devices) for i in group):
                return None
            ids = [devices[i] for i in group]
            if ids not in found:
                found.append(ids)
    return found


_COLLECTIVE = rf"^\s*(?:ROOT )?\S+ = .* ({'|'.join(KINDS)})(?:-start)?\((.*)$"
_WITH_SHAPE = rf"^\s*(?:ROOT )?\S+ = (.*?) ({'|'.join(KINDS)})(-start)?\((.*)$"


def collectives_by_group(text: str, devices: list[int]) -> dict[tuple, list[tuple[str, str, int]]]:
    """{group (global device ids in rank order): [(kind, element type, elements)...]} of
    the MPI calls the collectives over each group make, in the module's printed order
    (an all-reduce of several operands one per operand): the HLO element type ("s32")
    and the elements per rank XLA passes (an all-reduce's operand, an all-gather's block,
    a reduce-scatter's whole input), read from the result's shape; ("?", -1) where not
    read (an all-to-all's or permute's, whose steps go as bytes). Only for groups_in's
    groups; {} where those cannot be read."""
    if groups_in(text, devices) is None:
        return {}
    header = re.search(r"^HloModule .*$", text, re.M)
    replicas = _header_int(header, "replica_count")
    partitions = _header_int(header, "num_partitions")
    found: dict[tuple, list[tuple[str, str, int]]] = {}
    for match in re.finditer(_WITH_SHAPE, text, re.M):
        shape, kind, start, rest = match.group(1), match.group(2), match.group(3), match.group(4)
        arrays = [
            (t, int(np.prod([int(d) for d in dims.split(",") if d], dtype=np.int64)))
            for t, dims in re.findall(r"\b([a-z]+\d*)\[([\d,]*)\]", shape)
        ]
        for group in _logical_groups(kind, rest, replicas, partitions) or []:
            n = len(group)
            if kind == "all-reduce" and arrays:
                calls = arrays if shape.startswith("(") and not start else arrays[:1]
            elif kind == "all-gather" and len(arrays) == 1 and not start and arrays[0][1] % n == 0:
                calls = [(arrays[0][0], arrays[0][1] // n)]
            elif kind == "all-gather" and start and len(arrays) == 2:
                calls = arrays[:1]  # (operand, result)
            elif kind == "reduce-scatter" and len(arrays) == 1 and not start:
                calls = [(arrays[0][0], arrays[0][1] * n)]
            else:
                calls = [("?", -1)]
            found.setdefault(tuple(devices[i] for i in group), []).extend((kind, *c) for c in calls)
    return found


def in_order(text: str) -> bool:
    """Whether a compiled module's collectives are all in its ENTRY computation, where
    the printed order is the order they run in (a scheduled module's). One inside a loop
    or a branch (a computation printed before ENTRY) may run before or after others, or
    not at all: where two of its groups fit one split, the library then cannot tell which
    XLA is making. Without an ENTRY computation (no such text from XLA): True."""
    entry = re.search(r"^ENTRY .*$", text, re.M)
    if entry is None:
        return True
    end = text.find("\n}", entry.end())
    end = len(text) if end < 0 else end
    return all(entry.start() < m.start() < end for m in re.finditer(_COLLECTIVE, text, re.M))


def _header_int(header, name: str) -> int:
    m = header and re.search(rf"\b{name}=(\d+)", header.group(0))
    return int(m.group(1)) if m else 1


def _logical_groups(kind, rest, replicas, partitions) -> list[list[int]] | None:
    """The groups of one collective as logical ids (replica * partitions + partition)."""
    channel = re.search(r"\bchannel_id=\d+", rest) is not None
    global_ids = "use_global_device_ids=true" in rest
    everyone = list(range(replicas * partitions))
    if kind == "collective-permute":
        # Its ranks are the replicas (partitions with a channel): its group all of them.
        if channel and replicas == 1 or not channel and partitions == 1:
            return [everyone]
        return None
    groups = _replica_groups(rest)
    if groups is None:
        return None
    if channel and global_ids:
        return groups or [everyone]
    if channel and replicas == 1 or not channel and partitions == 1:  # ids are flat
        return groups or [everyone]
    if not channel and replicas == 1:  # each partition alone (cross-replica, one replica)
        return [[p] for p in everyone]
    return None


def _replica_groups(rest: str) -> list[list[int]] | None:
    """replica_groups={{0,1},{2,3}}, ={} (every device: []) or the iota form
    [G,S]<=[dims] with an optional T(perm)."""
    m = re.search(r"\breplica_groups=\{((?:\{[\d,]*\},?)*)\}", rest)
    if m:
        return [[int(i) for i in g.split(",") if i] for g in re.findall(r"\{([\d,]*)\}", m[1])]
    m = re.search(r"\breplica_groups=\[(\d+),(\d+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", rest)
    if m:
        ids = _iota(m[3], m[4])
        if ids is None or ids.size != int(m[1]) * int(m[2]):
            return None
        return ids.reshape(int(m[1]), int(m[2])).tolist()
    m = re.search(
        r"\breplica_groups=mesh\[([^\]]*)\](?:,\s*device_ids=\(([^()]*(?:\([\d,]*\))?)\))?"
        r"\s*\{([^}]*)\}",
        rest,
    )
    if m:
        return _mesh_groups(m[1], m[3], m[2])
    if "replica_groups=" not in rest:
        return []
    return None


def _mesh_groups(mesh: str, selected: str, device_ids: str | None = None) -> list[list[int]] | None:
    """The named form, replica_groups=mesh['x'=2,'y'=2] {'y'} (jaxlib 0.12), or with the
    mesh's ids in another order, mesh['x'=2,'y'=4], device_ids=([4,2]T(1,0)) {'x'} (also
    jaxlib 0.10): the ids (0.. in order, or device_ids: an iota [dims] with an optional
    transpose T(perm), or a list) laid out row-major over the mesh's axes, a group per
    index of the axes not selected, its ranks in the selected axes' order; None for forms
    not read here (sub-axes)."""
    axes = re.findall(r"'(\w+)'=(\d+)", mesh)
    names = [n for n, _ in axes]
    chosen = re.findall(r"'(\w+)'", selected)
    if not axes or len(axes) != mesh.count("=") or any(n not in names for n in chosen):
        return None
    if ":" in selected or "(" in selected:  # a sub-axis, e.g. {'a':(1)2}
        return None
    shape = [int(k) for _, k in axes]
    ids = _device_ids(device_ids, int(np.prod(shape)))
    if ids is None:
        return None
    ids = ids.reshape(shape)
    rest = [i for i, n in enumerate(names) if n not in chosen]
    order = rest + [names.index(n) for n in chosen]
    size = int(np.prod([int(axes[names.index(n)][1]) for n in chosen])) if chosen else 1
    return ids.transpose(order).reshape(-1, size).tolist()


def _device_ids(text: str | None, count: int):
    """A mesh's device_ids as a flat array of `count` ids: none given (0..count-1), the
    iota form [dims] or [dims]T(perm), or a list a,b,c; None where unread or not `count`."""
    if text is None:
        return np.arange(count)
    m = re.fullmatch(r"\[([\d,]+)\](?:T\(([\d,]+)\))?", text.strip())
    if m:
        ids = _iota(m[1], m[2])
        if ids is None:
            return None
    elif re.fullmatch(r"[\d,\s]+", text):
        ids = np.array([int(i) for i in text.split(",") if i.strip()])
    else:
        return None
    return ids if ids.size == count else None


def _iota(dims: str, perm: str | None):
    """XLA's iota tile [dims]T(perm) (both as printed, comma-separated) flattened: the ids
    0.. laid out over dims, then transposed by perm; None for a perm that is not one."""
    shape = [int(d) for d in dims.split(",")]
    ids = np.arange(int(np.prod(shape))).reshape(shape)
    if perm:
        order = [int(p) for p in perm.split(",")]
        if sorted(order) != list(range(len(shape))):
            return None
        ids = ids.transpose(order)
    return ids.reshape(-1)
