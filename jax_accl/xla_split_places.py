"""Which device asks a split, decided when a program is loaded (several CPU devices per
process under JAX_ACCL_XLA_COLLECTIVES=1).

XLA:CPU's split is MPI_Comm_split(MPI_COMM_WORLD, color = the group's first device,
key = the device's place), made by each device's thread for itself at the program's first
collective of that group, asynchronously to Python. Where groups that start with one
device hold two of one process's devices at one place (a psum over all of a process's
devices, then one with axis_index_groups; or over two mesh axes within a process), the
split does not say which of the two asks. jax_accl's MPI library answers with the group
of the earliest loaded program that XLA has not made yet (xla_ffi/mpiabi/communicators.cc,
device_of_split). That answer is right whenever the earlier program was dispatched
before the later one was loaded, both run on several devices of this process, and none
of the earlier one's collectives is inside a loop or a branch: XLA's CPU client launches
a program on several of its devices only once the one launched before it has completed
on every one of them (xla/pjrt/cpu/cpu_client.cc, PjRtCpuLoadedExecutable::Execute: "Gang
schedule collectives", its last collective launch event), and an earlier program that
completed has made every group it holds with this process's devices. Every other such
pair (the two groups in one program whose MPI calls are alike, whose threads split at
once; an earlier program loaded but not yet run; a program on one device of this
process, which XLA does not launch in that order; collectives inside a loop or a
branch, which may not run) is refused here, when the later program is loaded: in
Python's order of loading and dispatching, the same in every process, never by the
timing of XLA's threads. The two
groups in one program are admitted where their MPI calls tell them apart
(_why_not_deferred): the library then answers the split with a provisional
communicator, bound at its first call to the group whose calls it matches.

The algorithm: every place of every group a program brings is recorded by (first
device, place, process); a place already held by another device of that process is
checked against the rule above, and the program is refused (AcclError naming both
devices, the process and the place, and which condition failed) where it does not hold."""

from __future__ import annotations

from jax_accl.errors import AcclError
from jax_accl.xla_call_signature import signature

# (first device, place, process) -> [(device there, its group's devices, the numbers of
# the programs that hold that group)]
_places: dict[tuple[int, int, int], list[tuple[int, frozenset, set]]] = {}
# Programs loaded and not yet run: id(XLA's executable) -> (program number, what tells
# that executable from a later one that takes its id (_identity), what says whether it
# completes every group it holds with a process's devices before the next launch there:
# whether all its collectives are in its printed order, and how many devices of each
# process it runs on (two or more)). The executable is not kept alive by it: one that
# is never run is freed with its program.
_waiting: dict[int, tuple[int, tuple, tuple[bool, dict]]] = {}
# Programs run at least once (dispatched): program number -> that same (ordered, counts).
_run: dict[int, tuple[bool, dict]] = {}
_count = 0


def new_job() -> None:
    """Forgets every program: jax.distributed started a new job (the library's registry
    forgets their groups too, following its World)."""
    global _count
    _places.clear()
    _waiting.clear()
    _run.clear()
    _count = 0


def first_run(executable) -> None:
    """A loaded program is dispatched (jax's Python path runs every program's first call:
    _compat.hook_first_run)."""
    waiting = _waiting.get(id(executable))
    if waiting is not None and _same(waiting[1], _identity(executable)):
        del _waiting[id(executable)]
        _run[waiting[0]] = waiting[2]


def _identity(executable) -> tuple:
    """What tells `executable` from another that takes its id once it is freed, without
    holding it (XLA's executables take no weak reference): XLA's fingerprint of the
    compiled program (one of the same fingerprint is the same program on as many
    devices, admitted alike); an executable without one (a stand-in) is held."""
    fingerprint = getattr(executable, "fingerprint", None)
    return ("fingerprint", fingerprint) if fingerprint is not None else ("held", executable)


def _same(a: tuple, b: tuple) -> bool:
    return a[0] == b[0] and (a[1] is b[1] if a[0] == "held" else a[1] == b[1])


def admit(
    executable,
    groups: list[list[int]],
    process_of: dict[int, int],
    ordered: bool,
    collectives: dict | None = None,
):
    """Checks a loaded program's `groups` (global device ids in rank order) against those
    loaded before it in this job (every process judges a place by the devices of the
    place's process, so all judge alike); raises AcclError for a place the library could
    not answer (see the module's docstring). Returns a function that records them, to
    call once the library has taken them."""
    global _count
    # A place is of one process's devices, judged by how many of that process's devices
    # run the program (the same in every process, one that runs none of it included).
    counts: dict[int, int] = {}
    for p in process_of.values():
        counts[p] = counts.get(p, 0) + 1
    at_place: dict[tuple[int, int, int], list[list[int]]] = {}
    for group in groups:
        for place in range(1, len(group)):
            where = (group[0], place, process_of.get(group[place], -1))
            at_place.setdefault(where, []).append(group)
    for where, here in at_place.items():
        if len({g[where[1]] for g in here}) > 1:
            why = _why_not_deferred(here, collectives or {})
            if why is not None:
                first = here[0][where[1]]
                other = next(g for g in here if g[where[1]] != first)
                detail = _firsts_text((here[0], other), collectives or {}) + why
                raise AcclError(_message(where, first, other[where[1]], None, detail))
    for group in groups:
        for place in range(1, len(group)):
            device = group[place]
            where = (group[0], place, process_of.get(device, -1))
            for before, _, numbers in _places.get(where, ()):
                if before == device:
                    continue
                ran = [_settles(_run[n], where[2]) for n in numbers if n in _run]
                if not ran:
                    raise AcclError(_message(where, before, device, "it had not run"))
                if counts.get(where[2], 0) < 2 or not any(ran):
                    raise AcclError(_message(where, before, device, _UNSETTLED))
    number = _count = _count + 1

    def record() -> None:
        for group in groups:
            members = frozenset(group)
            for place in range(1, len(group)):
                where = (group[0], place, process_of.get(group[place], -1))
                held = _places.setdefault(where, [])
                same = [n for d, g, n in held if d == group[place] and g == members]
                if same:
                    same[0].add(number)  # the same group, of another program too
                else:
                    held.append((group[place], members, {number}))
        _waiting[id(executable)] = (number, _identity(executable), (ordered, counts))

    return record


def _settles(run: tuple[bool, dict], process: int) -> bool:
    """Whether a program dispatched has made its groups with `process`'s devices before
    XLA launches the next program there: all its collectives in order, on two or more of
    that process's devices."""
    ordered, counts = run
    return ordered and counts.get(process, 0) >= 2


_UNSETTLED = (
    "one of the two runs on only one device of this process, or some of the earlier "
    "one's collectives are inside a loop or a branch"
)


def _why_not_deferred(here: list[list[int]], collectives: dict) -> str | None:
    """Why the library could not tell apart the groups `here` of one program, which hold
    two of a process's devices at one place of groups that start with the same device
    (None: it can). It answers such a split with a provisional communicator (rank the
    place, size the groups' common size) bound to the group whose collectives the first
    call on it matches (xla_ffi/mpiabi/communicators.cc): certain only where the groups
    have one size and no call one group's collectives make could be another's."""
    sets = []
    for g in here:
        calls = collectives.get(tuple(g))
        if not calls:
            return "; the collectives of one of them could not be read"
        sets.append({signature(*c) for c in calls})
    # XLA:CPU's MPI all-reduce and all-gather never read the communicator's size (its
    # reduce-scatter, all-to-all and permute do): groups of several sizes are told apart
    # only where all their collectives are such.
    if len({len(g) for g in here}) > 1 and any(c[0] > 1 for s in sets for c in s):
        return (
            "; their sizes differ, which the split answers before any call, and one of "
            "them has a collective other than an all-reduce or all-gather, which XLA runs "
            "by that size"
        )
    for i, a in enumerate(sets):
        for j in range(i + 1, len(sets)):
            if here[i] != here[j] and any(_may_match(x, y) for x in a for y in sets[j]):
                return (
                    "; a collective of one makes the same MPI call (kind, element type, "
                    "count) as one of the other, so the first call on the split cannot "
                    "tell them apart"
                )
    return None


def _may_match(x: tuple, y: tuple) -> bool:
    """Whether one MPI call could fit both signatures (-1: not said by the call)."""
    return x[0] == y[0] and all(a == b or a < 0 or b < 0 for a, b in zip(x[1:], y[1:]))


def _firsts_text(pair, collectives: dict) -> str:
    """The two groups and the first MPI call of each, for a refusal's text."""
    parts = []
    for group in pair:
        calls = collectives.get(tuple(group))
        what = f"first {calls[0][0]} {calls[0][1]} x{calls[0][2]}" if calls else "unread"
        parts.append(f"[{' '.join(map(str, group))}]: {what}")
    return f" (the groups {', '.join(parts)})"


def _message(where, before: int, now: int, failed: str | None, detail: str = "") -> str:
    first, place, process = where
    if failed is None:
        which = "this program's"
        why = f"Both groups are this program's, whose device threads split at once{detail}"
    else:
        which = "a program loaded before it in this job"
        why = (
            "The earlier program's group is taken first only where that program was run "
            "before this one was loaded, both run on several devices of this process and "
            f"none of the earlier one's collectives is inside a loop or a branch ({failed}): "
            "then XLA launches this one once the earlier has completed on every device, "
            "its groups made"
        )
    return (
        f"jax_accl: this program has a collective group that starts with device {first} "
        f"and holds device {now} of process {process} at place {place}, where a group of "
        f"{which} that starts with device {first} holds device {before} of the same "
        "process. With JAX_ACCL_XLA_COLLECTIVES=1 and several CPU devices per process, "
        "each device's thread makes its own MPI_Comm_split(MPI_COMM_WORLD, color = the "
        "group's first device, key = its place), which does not say which of those two "
        f"devices asks. {why}. jax_accl refuses this program now, when it is compiled or "
        "loaded (the same in every process), rather than give one device the other's "
        "communicator; the programs loaded before it keep running. Run the earlier "
        "program once before compiling this one, give such collectives groups that do "
        "not start with the same device, run with one CPU device per process, use "
        "jax_accl.shard_map, or run without JAX_ACCL_XLA_COLLECTIVES (gloo)"
    )
