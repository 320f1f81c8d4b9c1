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
devices, the process and the place, and which condition failed) where it does not hold.

A program loaded that never runs would hold its places (and, in the library, its groups,
which make a split they fit with another program's ambiguous: communicators.cc,
parent_among) for the job's life. Where it is known not to run, it is withdrawn: its
places forgotten here and its groups in the library (`untell`, forget_groups), once JAX
refused its first run before XLA launched it (its thread guard: not_run), or the loaded
program was freed (the callback record() returns, for _compat.hook_loading). A program
whose run was refused may be run again (from the guard's thread): first_run then admits
and tells it again, before XLA runs it, as at a loading."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass

from jax_accl.errors import AcclError
from jax_accl.xla_call_signature import signature

# (first device, place, process) -> [(device there, its group's devices, the numbers of
# the programs that hold that group)]
_places: dict[tuple[int, int, int], list[tuple[int, frozenset, set]]] = {}


@dataclass(eq=False)
class _Loading:
    """A program loaded and not yet run. `number`: its program number, None while it is
    withdrawn (its places and groups not held); `identity`: what tells its executable
    from a later one that takes its id (_identity); `settles`: whether it completes every
    group it holds with a process's devices before the next launch there (all its
    collectives in its printed order, and how many devices of each process it runs on);
    `again`: admit's arguments, to admit it again; `tell`/`untell`: its groups told to
    the library and forgotten there. None holds XLA's executable (but a stand-in without
    a fingerprint, _identity's): one never run is freed with its program."""

    key: int
    number: int | None
    identity: tuple
    settles: tuple[bool, dict]
    again: tuple
    tell: Callable[[], None] | None
    untell: Callable[[], None] | None
    job: int


# Programs loaded and not yet run: id(XLA's executable) -> its loadings.
_waiting: dict[int, list[_Loading]] = {}
# Loadings whose program was freed, withdrawn at the next admit or first_run (a
# finalizer may run anywhere, inside those too).
_freed: list[_Loading] = []
# Programs run at least once (dispatched): program number -> that same (ordered, counts).
_run: dict[int, tuple[bool, dict]] = {}
# Runs begun per loaded program (id of XLA's executable): a refused run withdraws its
# program only where no other run of it (another thread's) began after it.
_dispatches: dict[int, int] = {}
_count = 0
_job = 0
# Programs may be loaded and run from several Python threads at once.
_lock = threading.RLock()


def _locked(f):
    @functools.wraps(f)
    def under_lock(*args, **kwargs):
        with _lock:
            return f(*args, **kwargs)

    return under_lock


@_locked
def new_job() -> None:
    """Forgets every program: jax.distributed started a new job (the library's registry
    forgets their groups too, following its World)."""
    global _count, _job
    _places.clear()
    _waiting.clear()
    _freed.clear()
    _run.clear()
    _dispatches.clear()
    _count = 0
    _job += 1


@_locked
def first_run(executable) -> tuple[int, int, list[_Loading]]:
    """A loaded program is dispatched (jax's Python path runs every program's first call:
    _compat.hook_first_run). One withdrawn since it was loaded (JAX refused a run of it)
    is admitted and told to the library again first: AcclError where a program loaded
    meanwhile makes it ambiguous. Returns, for not_run, which run of it this is and its
    loadings marked run now."""
    _withdraw_freed()
    key = id(executable)
    _dispatches[key] = _dispatches.get(key, 0) + 1
    now = []
    for loading in list(_waiting.get(id(executable), ())):
        if not _same(loading.identity, _identity(executable)):
            continue
        if loading.number is None:
            _check(*loading.again, when=_AGAIN)
            if loading.tell is not None:
                loading.tell()
            loading.number = _record(*loading.again[:2])
        _waiting[loading.key].remove(loading)
        if not _waiting[loading.key]:
            del _waiting[loading.key]
        _run[loading.number] = loading.settles
        now.append(loading)
    return key, _dispatches[key], now


@_locked
def not_run(run: tuple[int, int, list[_Loading]]) -> None:
    """JAX refused the run first_run announced (`run`, what it returned) before XLA
    launched it (its thread guard): its loadings never ran, and XLA made none of their
    groups. They are withdrawn until first_run is called for them again, unless another
    run of the program began since (another thread's, which XLA may be running)."""
    key, number, loadings = run
    if _dispatches.get(key) != number:
        return
    for loading in loadings:
        if loading.job != _job or loading.number is None:
            continue
        _run.pop(loading.number, None)
        _withdraw(loading)
        _waiting.setdefault(loading.key, []).append(loading)


def _withdraw(loading: _Loading) -> None:
    """Forgets `loading`'s places here and its groups in the library."""
    number, loading.number = loading.number, None
    for where in list(_places):
        held = _places[where]
        for entry in list(held):
            entry[2].discard(number)
            if not entry[2]:
                held.remove(entry)
        if not held:
            del _places[where]
    if loading.untell is not None:
        loading.untell()


def _withdraw_freed() -> None:
    """Withdraws the loadings whose program was freed before it ran."""
    while _freed:
        try:
            loading = _freed.pop()
        except IndexError:  # another thread took the last
            return
        waiting = _waiting.get(loading.key, [])
        if loading.job != _job or loading not in waiting:
            continue  # it ran, or is of an earlier job
        waiting.remove(loading)
        if not waiting:
            del _waiting[loading.key]
        if loading.number is not None:
            _withdraw(loading)


def _identity(executable) -> tuple:
    """What tells `executable` from another that takes its id once it is freed, without
    holding it (XLA's executables take no weak reference): XLA's fingerprint of the
    compiled program (one of the same fingerprint is the same program on as many
    devices, admitted alike); an executable without one (a stand-in) is held."""
    fingerprint = getattr(executable, "fingerprint", None)
    return ("fingerprint", fingerprint) if fingerprint is not None else ("held", executable)


def _same(a: tuple, b: tuple) -> bool:
    return a[0] == b[0] and (a[1] is b[1] if a[0] == "held" else a[1] == b[1])


@_locked
def admit(
    executable,
    groups: list[list[int]],
    process_of: dict[int, int],
    ordered: bool,
    collectives: dict | None = None,
    tell: Callable[[], None] | None = None,
    untell: Callable[[], None] | None = None,
):
    """Checks a loaded program's `groups` (global device ids in rank order) against those
    loaded before it in this job (every process judges a place by the devices of the
    place's process, so all judge alike); raises AcclError for a place the library could
    not answer (see the module's docstring). Then tells the library (`tell`; `untell`
    forgets them there where the program is withdrawn) and records them, all under one
    lock, so that two threads loading conflicting programs cannot both pass the check.
    Returns the function to call once the loaded program is freed, or if its loading
    fails."""
    _withdraw_freed()
    again = (groups, process_of, ordered, collectives)
    _check(*again)
    if tell is not None:
        tell()
    loading = _Loading(
        key=id(executable),
        number=_record(groups, process_of),
        identity=_identity(executable),
        settles=(ordered, _counts(process_of)),
        again=again,
        tell=tell,
        untell=untell,
        job=_job,
    )
    _waiting.setdefault(loading.key, []).append(loading)
    return lambda: _freed.append(loading)


def _counts(process_of: dict[int, int]) -> dict[int, int]:
    """How many of each process's devices run the program."""
    counts: dict[int, int] = {}
    for p in process_of.values():
        counts[p] = counts.get(p, 0) + 1
    return counts


_LOADED = "when it is compiled or loaded"
_AGAIN = (
    "when it is run again, JAX having refused its earlier run (its groups were withdrawn "
    "then, and a program loaded since holds the place)"
)


def _check(groups, process_of, ordered, collectives, when: str = _LOADED) -> None:
    """admit's check (see there); `when` the refusal happens, for its message."""
    # A place is of one process's devices, judged by how many of that process's devices
    # run the program (the same in every process, one that runs none of it included).
    counts = _counts(process_of)
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
                raise AcclError(_message(where, first, other[where[1]], None, detail, when))
    for group in groups:
        for place in range(1, len(group)):
            device = group[place]
            where = (group[0], place, process_of.get(device, -1))
            for before, _, numbers in _places.get(where, ()):
                if before == device:
                    continue
                ran = [_settles(_run[n], where[2]) for n in numbers if n in _run]
                if not ran:
                    raise AcclError(_message(where, before, device, "it had not run", "", when))
                if counts.get(where[2], 0) < 2 or not any(ran):
                    raise AcclError(_message(where, before, device, _UNSETTLED, "", when))


def _record(groups, process_of) -> int:
    """Records a program's places under a new program number, which it returns."""
    global _count
    number = _count = _count + 1
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
    return number


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


def _message(
    where, before: int, now: int, failed: str | None, detail: str = "", when: str = _LOADED
) -> str:
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
        f"devices asks. {why}. jax_accl refuses this program now, {when} (the same in "
        "every process), rather than give one device the other's "
        "communicator; the programs loaded before it keep running. Run the earlier "
        "program once before compiling this one, give such collectives groups that do "
        "not start with the same device, run with one CPU device per process, use "
        "jax_accl.shard_map, or run without JAX_ACCL_XLA_COLLECTIVES (gloo)"
    )
