"""The groups the XLA backend's loading hook (jax_accl/xla_subsets.py) reads from a
compiled program's HLO and tells jax_accl's MPI library, so that XLA's splits of
MPI_COMM_WORLD are made among the group's processes only (a program on some of the
processes runs): every form XLA writes them in, the device order XLA ranks them in,
and the refusal, at compile time, of a program on some processes whose groups cannot be
read. The multi-process runs are in tests/multiprocess/test_xla_backend_start.py."""

import ctypes
from types import SimpleNamespace

import jax
import pytest

from jax_accl import _compat, xla_collectives, xla_split_places, xla_subsets
from jax_accl.errors import AcclError

HEADER = "HloModule jit_f, is_scheduled=true, entry_computation_layout={()->()}{extra}\n\n"
# Global device ids of 4 processes' devices, in a device assignment's order.
DEVICES = [0, 2048, 4096, 6144]


def module(*lines, extra=", num_partitions=4"):
    return HEADER.replace("{extra}", extra) + "\n".join(f"  {line}" for line in lines)


def op(kind, attributes):
    return f"ROOT %r = s32[1,4]{{1,0}} {kind}(%p), {attributes}, to_apply=%sum"


@pytest.mark.parametrize(
    "attributes, groups",
    [
        (
            "channel_id=1, replica_groups={{0,1},{2,3}}, use_global_device_ids=true",
            [[0, 1], [2, 3]],
        ),
        ("channel_id=1, replica_groups={{3,1}}, use_global_device_ids=true", [[3, 1]]),
        ("channel_id=1, replica_groups=[2,2]<=[4], use_global_device_ids=true", [[0, 1], [2, 3]]),
        (
            "channel_id=1, replica_groups=[2,2]<=[2,2]T(1,0), use_global_device_ids=true",
            [[0, 2], [1, 3]],
        ),
        ("channel_id=1, replica_groups={}, use_global_device_ids=true", [[0, 1, 2, 3]]),
        ("channel_id=1, replica_groups=[1,4]<=[4]", [[0, 1, 2, 3]]),  # partition ids
        ("replica_groups={{0},{1},{2},{3}}", [[0], [1], [2], [3]]),  # one replica each
        # The named form of jaxlib 0.12: a group per index of the axes not selected.
        (
            "channel_id=1, replica_groups=mesh['x'=2,'y'=2] {'y'}, use_global_device_ids=true",
            [[0, 1], [2, 3]],
        ),
        (
            "channel_id=1, replica_groups=mesh['x'=2,'y'=2] {'x'}, use_global_device_ids=true",
            [[0, 2], [1, 3]],
        ),
        (
            "channel_id=1, replica_groups=mesh['x'=2,'y'=2] {'x','y'}, use_global_device_ids=true",
            [[0, 1, 2, 3]],
        ),
    ],
)
def test_the_groups_of_each_form_as_global_device_ids_in_xlas_rank_order(attributes, groups):
    for kind in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all"):
        text = module(op(kind, attributes))
        assert xla_subsets.groups_in(text, DEVICES) == [[DEVICES[i] for i in g] for g in groups]


@pytest.mark.parametrize(
    "device_ids, selected, groups",
    [
        # As jaxlib 0.10.2 printed them for jax's array_test at 8 processes (mesh
        # ('axis_0'=2, 'axis_1'=1, 'axis_2'=4)): the mesh's ids an iota, transposed.
        ("[4,2]T(1,0)", "'axis_0'", [[0, 1], [2, 3], [4, 5], [6, 7]]),
        ("[2,2,2]T(1,0,2)", "'axis_0'", [[0, 2], [1, 3], [4, 6], [5, 7]]),
        ("[2,2,2]T(1,0,2)", "'axis_2'", [[0, 1, 4, 5], [2, 3, 6, 7]]),
        ("[8]", "'axis_0','axis_2'", [[0, 1, 2, 3, 4, 5, 6, 7]]),
        ("7,6,5,4,3,2,1,0", "'axis_2'", [[7, 6, 5, 4], [3, 2, 1, 0]]),  # a list
    ],
)
def test_the_named_form_with_the_meshs_device_ids_in_another_order(device_ids, selected, groups):
    devices = list(range(0, 8 * 2048, 2048))
    attributes = (
        "channel_id=1, replica_groups=mesh['axis_0'=2,'axis_1'=1,'axis_2'=4], "
        f"device_ids=({device_ids}) {{{selected}}}, dimensions={{0}}, use_global_device_ids=true"
    )
    text = module(op("all-gather", attributes), extra=", num_partitions=8")
    assert xla_subsets.groups_in(text, devices) == [[devices[i] for i in g] for g in groups]


@pytest.mark.parametrize("device_ids", ["[4,4]", "[4,2]T(1,0", "[4,2]T(0,0)", "0,1,2", "x"])
def test_device_ids_that_do_not_fit_the_mesh_are_not_read(device_ids):
    attributes = (
        "channel_id=1, replica_groups=mesh['x'=2,'y'=4], "
        f"device_ids=({device_ids}) {{'x'}}, use_global_device_ids=true"
    )
    text = module(op("all-reduce", attributes), extra=", num_partitions=8")
    assert xla_subsets.groups_in(text, list(range(8))) is None


def test_a_pmap_program_counts_replicas_and_async_collectives_count_once():
    text = module(
        "%s = (s32[4], s32[4]) all-reduce-start(%p), replica_groups={{0,1,2,3}}, to_apply=%a",
        "ROOT %d = s32[4] all-reduce-done(%s)",
        extra=", replica_count=4",
    )
    assert xla_subsets.groups_in(text, DEVICES) == [DEVICES]


def test_a_collective_permute_is_a_group_of_every_device_of_the_program():
    """XLA's CollectivePermuteThunk ranks its peers by their partition (replica) ids: its
    communicator is every device of the program."""
    text = module(
        "ROOT %q = s32[1] collective-permute(%p), channel_id=2, source_target_pairs={{0,1},{1,0}}",
        extra=", num_partitions=2",
    )
    assert xla_subsets.groups_in(text, [4096, 2048]) == [[4096, 2048]]


def test_groups_that_cannot_be_read_are_none():
    both = ", replica_count=2, num_partitions=2"
    assert (
        xla_subsets.groups_in(
            module(op("all-reduce", "replica_groups={{0,1}}"), extra=both), DEVICES
        )
        is None
    )
    assert xla_subsets.groups_in(module(op("all-reduce", "replica_groups=<odd>")), DEVICES) is None
    assert (
        xla_subsets.groups_in(
            module(op("all-reduce", "channel_id=1, replica_groups={{0,7}}")), DEVICES
        )
        is None
    )
    assert xla_subsets.groups_in(module(op("all-reduce", "channel_id=1")), DEVICES[:2]) is None


@pytest.fixture(autouse=True)
def a_new_job():
    xla_split_places.new_job()  # no groups told by another test
    yield
    xla_split_places.new_job()


TOLD_CALLS: list = []  # each program's collectives_by_group, as told to the library


def fake_program(monkeypatch, text, processes, local_devices=1):
    monkeypatch.setattr(jax, "process_count", lambda: 4)
    monkeypatch.setattr(jax, "process_index", lambda: 0)
    monkeypatch.setattr(jax, "local_device_count", lambda: local_devices)
    monkeypatch.setattr(_compat, "compiled_text", lambda executable: text)
    told = []

    def note(*a, collectives=None, **kw):
        told.append(a + tuple(kw.items()))
        TOLD_CALLS.append(collectives)

    monkeypatch.setattr(xla_subsets, "note_groups", note)
    devices = [SimpleNamespace(id=DEVICES[p], process_index=p) for p in processes]
    return devices, told


def test_a_program_on_some_processes_is_told_to_the_library_as_a_subset(monkeypatch):
    text = module(
        op("all-reduce", "channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true"),
        extra=", num_partitions=2",
    )
    devices, told = fake_program(monkeypatch, text, [3, 1])
    xla_subsets.check(devices, None)
    assert told == [([6144, 2048], [[6144, 2048]], True, True)]
    devices, told = fake_program(
        monkeypatch,
        module(op("all-reduce", "channel_id=1, replica_groups={}, use_global_device_ids=true")),
        [0, 1, 2, 3],
    )
    xla_subsets.check(devices, None)
    assert told == [(DEVICES, [DEVICES], False, True)]


def test_collectives_inside_a_loop_or_a_branch_leave_the_programs_order_unknown():
    """The printed order of a scheduled module's ENTRY computation is the order its
    collectives run in; one inside a while body or a branch (printed before ENTRY) may
    run before, after or never: the library is told, and refuses a split two of such a
    program's groups fit rather than guess (native self-test known_groups)."""
    entry = (
        "ENTRY %main (p: s32[1,4]) -> s32[1,4] {\n"
        "  %p = s32[1,4]{1,0} parameter(0)\n"
        "  ROOT %r = s32[1,4]{1,0} all-reduce(%p), channel_id=1, replica_groups={{0,1,2,3}}, "
        "use_global_device_ids=true, to_apply=%sum\n}\n"
    )
    body = (
        "%body (q: s32[1,4]) -> s32[1,4] {\n"
        "  %q = s32[1,4]{1,0} parameter(0)\n"
        "  ROOT %b = s32[1,4]{1,0} all-reduce(%q), channel_id=2, replica_groups={{0,1},{2,3}}, "
        "use_global_device_ids=true, to_apply=%sum\n}\n\n"
    )
    header = HEADER.replace("{extra}", ", num_partitions=4")
    assert xla_subsets.in_order(header + entry)
    assert not xla_subsets.in_order(header + body + entry)
    assert xla_subsets.groups_in(header + body + entry, DEVICES) == [
        DEVICES[:2],
        DEVICES[2:],
        DEVICES,
    ]


def test_a_program_on_some_processes_whose_groups_cannot_be_read_is_refused_at_once(monkeypatch):
    text = module(op("all-reduce", "replica_groups=<odd>"), extra=", num_partitions=2")
    devices, told = fake_program(monkeypatch, text, [1, 2])
    with pytest.raises(AcclError) as refused:
        xla_subsets.check(devices, None)
    assert str(refused.value).startswith(
        "jax_accl: this program runs on processes [1, 2] of 4 and holds XLA collectives "
        "(all-reduce) whose groups jax_accl cannot read from its HLO."
    )
    assert "MPI_Comm_split of MPI_COMM_WORLD called from the participating processes" in str(
        refused.value
    )
    assert told == []
    # On every process it is split among every process, as before: not refused, and told
    # as a program of unknown groups (no split of its devices taken for another's group).
    devices, told = fake_program(
        monkeypatch, module(op("all-reduce", "replica_groups=<odd>")), [0, 1, 2, 3]
    )
    xla_subsets.check(devices, None)
    assert told == [(DEVICES, [], ("subset", False), ("unknown", True))]


def test_with_several_devices_per_process_programs_on_one_process_are_told_and_unread_refused(
    monkeypatch,
):
    """Each device's thread splits for itself, and the library takes the asking device
    from the groups: a program on one process's 2 devices is told (a subset), and one
    whose groups cannot be read is refused at once, even on every process."""
    text = module(
        op("all-reduce", "channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true"),
        extra=", num_partitions=2",
    )
    devices, told = fake_program(monkeypatch, text, [], local_devices=2)
    devices = [SimpleNamespace(id=i, process_index=0) for i in (0, 1)]
    xla_subsets.check(devices, None)
    assert told == [([0, 1], [[0, 1]], True, True)]
    devices, told = fake_program(
        monkeypatch, module(op("all-reduce", "replica_groups=<odd>")), [0, 1, 2, 3], 2
    )
    with pytest.raises(AcclError) as refused:
        xla_subsets.check(devices, None)
    assert str(refused.value).startswith(
        "jax_accl: this program holds XLA collectives (all-reduce) whose groups jax_accl "
        "cannot read from its HLO, and this process has 2 CPU devices."
    )
    assert told == []


def test_programs_without_collectives_or_on_one_process_are_left_alone(monkeypatch):
    devices, told = fake_program(monkeypatch, module("ROOT %c = s32[] constant(0)"), [1, 2])
    xla_subsets.check(devices, None)
    devices, told = fake_program(monkeypatch, module(op("all-reduce", "replica_groups=<odd>")), [2])
    xla_subsets.check(devices, None)
    assert told == []


def test_the_library_takes_well_formed_groups_and_refuses_others(capfd):
    lib = ctypes.CDLL(str(xla_collectives.LIBRARY))
    note = lib.jax_accl_mpi_note_groups
    note.argtypes = [ctypes.POINTER(ctypes.c_int64), ctypes.c_int64]

    def call(*data):
        return note((ctypes.c_int64 * len(data))(*data), len(data))

    # Devices no job of this process has: nothing it splits can match them.
    assert call(1, 2, 10**9, 10**9 + 1, 1, 2, 10**9, 10**9 + 1) == 0
    assert call(1, 2, 10**9, 10**9 + 1, 2, 2, 10**9) == -1
    assert "note_groups: " in capfd.readouterr().err
    assert call(0, 9) == -1


def test_a_sub_axis_of_the_named_form_is_not_read():
    text = module(
        op(
            "all-reduce",
            "channel_id=1, replica_groups=mesh['a'=8] {'a':(1)2}, use_global_device_ids=true",
        ),
        extra=", num_partitions=8",
    )
    assert xla_subsets.groups_in(text, list(range(8))) is None


def all_reduces(*groups):
    """An HLO module of one all-reduce per replica-groups text (4 partitions)."""
    lines = [
        f"%r{i} = s32[1,4]{{1,0}} all-reduce(%p), channel_id={i + 1}, replica_groups={g}, "
        "use_global_device_ids=true, to_apply=%sum"
        for i, g in enumerate(groups)
    ]
    return module(*lines)


def load(monkeypatch, text):
    """A program of one process's 4 devices loaded (its executable returned), or refused
    (the AcclError's text); whether the library was told."""
    devices = [SimpleNamespace(id=i, process_index=0) for i in range(4)]
    _, told = fake_program(monkeypatch, text, [], local_devices=4)
    executable = object()
    try:
        xla_subsets.check(devices, executable)
    except AcclError as e:
        assert told == []
        return str(e)
    assert len(told) == 1
    return executable


# One process's 4 devices as a (2, 2) mesh ("a", "b"): the groups of a psum over every
# device, over "a" and over "b"; the first two put devices 1 and 2 at place 1 of color 0,
# as do the last two.
EVERY, OVER_A, OVER_B = "{{0,1,2,3}}", "{{0,2},{1,3}}", "{{0,1},{2,3}}"


def test_two_of_a_processs_devices_at_one_place_of_one_program_are_refused_at_loading(
    monkeypatch,
):
    """A split from place 1 of color 0 does not say whether device 2 or 1 asks; in one
    program both devices' threads split at once: refused when loaded, naming both
    devices, the process and the place; never told to the library."""
    for both in (all_reduces(OVER_A, OVER_B), all_reduces(EVERY, OVER_A)):
        refused = load(monkeypatch, both)
        assert isinstance(refused, str)
        assert "of process 0 at place 1, where a group of this program's that starts" in refused


def test_a_later_programs_device_at_a_held_place_is_taken_only_after_the_earlier_ran(
    monkeypatch,
):
    """A psum over every device, then one over "a" (as jax's all_reduce_test does with
    axis_index_groups), or one over "b" then one over "a": the later program's device 2
    asks place 1 of color 0, the earlier's device 1. Admitted once the earlier has run
    (XLA launches the later on this process's devices only once the earlier completed
    on all of them, its groups made); refused while it has not, whatever XLA's threads
    do meanwhile. A new job forgets the groups."""
    for first in (EVERY, OVER_B):
        xla_split_places.new_job()
        earlier = load(monkeypatch, all_reduces(first))
        refused = load(monkeypatch, all_reduces(OVER_A))
        assert isinstance(refused, str)
        assert refused.startswith(
            "jax_accl: this program has a collective group that starts with device 0 and "
            "holds device 2 of process 0 at place 1, where a group of a program loaded "
            "before it in this job that starts with device 0 holds device 1 of the same "
            "process."
        )
        assert "(it had not run)" in refused
        xla_split_places.first_run(earlier)
        assert not isinstance(load(monkeypatch, all_reduces(OVER_A)), str)
    xla_split_places.new_job()
    assert not isinstance(load(monkeypatch, all_reduces(OVER_B)), str)


def test_a_held_place_of_a_program_on_one_device_here_or_inside_a_loop_is_refused(monkeypatch):
    """XLA launches a program on one device of a process without waiting for the one
    before, and a collective inside a loop or a branch may not run: after such a program
    ran, a later one whose device at a place it holds differs is refused."""
    devices = [SimpleNamespace(id=i, process_index=0) for i in (0, 1)]
    devices.append(SimpleNamespace(id=10, process_index=1))
    text = module(
        op("all-reduce", "channel_id=1, replica_groups={{1,0}}, use_global_device_ids=true"),
        extra=", num_partitions=2",
    )
    _, told = fake_program(monkeypatch, text, [])
    executable = object()
    xla_subsets.check([devices[0], devices[2]], executable)  # the group [10 0]
    assert told == [([0, 10], [[10, 0]], True, True)]
    xla_split_places.first_run(executable)
    with pytest.raises(AcclError) as refused:
        xla_subsets.check([devices[1], devices[2]], object())  # the group [10 1]
    assert "runs on only one device of this process" in str(refused.value)
    xla_split_places.new_job()
    loop = all_reduces(EVERY).replace("%r0 =", "%body {\n  %r0 =") + "\n}\nENTRY %main {\n}"
    assert not xla_subsets.in_order(loop)
    xla_split_places.first_run(load(monkeypatch, loop))
    assert "inside a loop or a branch)" in load(monkeypatch, all_reduces(OVER_A))


def test_one_device_per_process_never_conflicts(monkeypatch):
    """Groups that start with one device and differ at a place hold there devices of
    different processes: each process's one device thread asks, no ambiguity."""
    text_a = module(
        op("all-reduce", "channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true")
    )
    text_b = module(
        op("all-reduce", "channel_id=1, replica_groups={{0,2}}, use_global_device_ids=true")
    )
    for text in (text_a, text_b):
        devices, told = fake_program(monkeypatch, text, [0, 1, 2, 3])
        xla_subsets.check(devices, None)
        assert len(told) == 1


class Executable:
    """A stand-in for XLA's loaded executable: its fingerprint, and weak references to
    see whether it is still held."""

    def __init__(self, fingerprint: bytes):
        self.fingerprint = fingerprint


def test_a_loaded_program_is_not_kept_alive_until_it_runs(monkeypatch):
    """A program loaded and never run is freed with its owner (jax_accl keeps only its
    fingerprint, so holding its places does not hold the program); one that runs still
    counts as run. The stand-in freed here is not what jax_accl watches: a program is
    withdrawn only when JAX's own loaded program is freed or its run refused by the
    thread guard (tests/multiprocess/test_xla_unrun_programs.py)."""
    import gc
    import weakref

    devices = [SimpleNamespace(id=i, process_index=0) for i in range(4)]
    xla_split_places.new_job()
    fake_program(monkeypatch, all_reduces(EVERY), [], local_devices=4)
    never_run = Executable(b"every")
    xla_subsets.check(devices, never_run)
    gone = weakref.ref(never_run)
    del never_run
    gc.collect()
    assert gone() is None
    # Not run and not withdrawn: a later program at a place it holds is refused.
    assert "(it had not run)" in load(monkeypatch, all_reduces(OVER_A))
    xla_split_places.new_job()
    fake_program(monkeypatch, all_reduces(EVERY), [], local_devices=4)
    ran = Executable(b"every")
    xla_subsets.check(devices, ran)
    xla_split_places.first_run(Executable(b"another program"))  # not it: nothing changes
    assert "(it had not run)" in load(monkeypatch, all_reduces(OVER_A))
    xla_split_places.first_run(ran)
    assert not isinstance(load(monkeypatch, all_reduces(OVER_A)), str)
    xla_split_places.new_job()


class GrowingLibrary:
    """The MPI library's held groups as XLA's threads change them between a caller's
    calls: each call is one snapshot (the library's contract), the next one larger."""

    def __init__(self, snapshots):
        self.snapshots = snapshots
        self.calls = 0

    def jax_accl_mpi_held_groups(self, out, capacity):
        snapshot = self.snapshots[min(self.calls, len(self.snapshots) - 1)]
        self.calls += 1
        if out is not None and len(snapshot) <= capacity:
            for i, v in enumerate(snapshot):
                out[i] = v
        return len(snapshot)


def test_held_groups_read_one_whole_snapshot_while_xla_splits(monkeypatch):
    """A rejoin publishes the groups XLA holds (jax_accl.membership): read while XLA's
    threads split, between the size asked and the groups read, they are those of one
    snapshot, whole, never a part of a later one."""
    one = [1, 2, 7, 0, 4]  # one group: 2 devices [0 4] on lane 7
    two = [2, 2, 7, 0, 4, 2, 9, 1, 5]  # and [1 5] on lane 9, split in between
    library = GrowingLibrary([one, two, two])
    monkeypatch.setattr(xla_subsets, "_loaded", lambda: library)
    assert xla_subsets.held_groups() == [[7, 0, 4], [9, 1, 5]]
    assert library.calls == 3


def test_each_groups_mpi_calls_are_read_from_the_result_shapes():
    """The (kind, element type, elements per rank) of the MPI calls each group's
    collectives make: an all-reduce's operand (one per operand of a tuple), an
    all-gather's block (its result over the group's size), a reduce-scatter's whole
    input; an all-to-all's not read (its steps go as bytes)."""
    text = module(
        "%a = s32[2,4]{1,0} all-gather(%p), channel_id=1, replica_groups={{0,2},{1,3}}, "
        "dimensions={0}, use_global_device_ids=true",
        "%b = (f32[3]{0}, s64[]) all-reduce(%q, %s), channel_id=2, replica_groups={{0,1},{2,3}}, "
        "use_global_device_ids=true, to_apply=%sum",
        "%c = f32[2]{0} reduce-scatter(%r), channel_id=3, replica_groups={{0,1,2,3}}, "
        "dimensions={0}, use_global_device_ids=true, to_apply=%sum",
        "%d = u8[4]{0} all-to-all(%t), channel_id=4, replica_groups={{0,2},{1,3}}, dimensions={0}",
    )
    calls = xla_subsets.collectives_by_group(text, [0, 1, 2, 3])
    assert calls[(0, 2)] == [("all-gather", "s32", 4), ("all-to-all", "?", -1)]
    assert calls[(0, 1)] == [("all-reduce", "f32", 3), ("all-reduce", "s64", 1)]
    assert calls[(0, 1, 2, 3)] == [("reduce-scatter", "f32", 8)]
    assert xla_subsets.signature("all-gather", "s32", 4) == (1, 3, 4)
    assert xla_subsets.signature("all-to-all", "?", -1) == (3, -1, -1)
    assert xla_subsets.signature("all-reduce", "pred", 2) == (0, 5, 2)  # as MPI_UINT8_T


def ops(*pairs):
    """A module of one collective per (kind and result shape, replica groups) pair."""
    lines = []
    for i, (what, groups) in enumerate(pairs):
        kind, shape = what.split(" ")
        extra = ", dimensions={0}" if kind != "all-reduce" else ", to_apply=%sum"
        lines.append(
            f"%c{i} = {shape} {kind}(%p), channel_id={i + 1}, replica_groups={groups}, "
            f"use_global_device_ids=true{extra}"
        )
    return module(*lines)


def test_one_programs_two_groups_at_one_place_are_admitted_where_their_calls_differ(
    monkeypatch,
):
    """Groups over "a" and "b" of one process's (2, 2) mesh (devices 2 and 1 at place 1
    of color 0) in one program: admitted where no MPI call of one group's collectives
    could be one of the other's (an all-gather and an all-reduce, as jax's
    test_sharded_mul; two all-gathers of different blocks; groups of two sizes whose
    collectives are all all-reduces or all-gathers), their calls told to the library to
    bind the split at its first call; refused, naming both groups and their first
    calls, where the calls are alike, where one is not read (an all-to-all's: the
    library could not tell it from another all-to-all), or where sizes differ and a
    collective reads the size (a reduce-scatter)."""
    admitted = [
        ops(("all-gather s32[4]{0}", OVER_A), ("all-reduce s32[8]{0}", OVER_B)),
        ops(("all-gather s32[4]{0}", OVER_A), ("all-gather s32[8]{0}", OVER_B)),
        ops(("all-gather f32[8]{0}", EVERY), ("all-reduce f32[2]{0}", OVER_A)),
    ]
    for text in admitted:
        xla_split_places.new_job()
        TOLD_CALLS.clear()
        assert not isinstance(load(monkeypatch, text), str), text
        assert TOLD_CALLS and TOLD_CALLS[0], text  # each group's calls told
    refused = {
        "makes the same MPI call": ops(
            ("all-reduce s32[4]{0}", OVER_A), ("all-reduce s32[4]{0}", OVER_B)
        ),
        "makes the same MPI call ": ops(
            ("all-to-all s32[4]{0}", OVER_A), ("all-to-all s32[8]{0}", OVER_B)
        ),
        "their sizes differ": ops(
            ("reduce-scatter s32[1]{0}", EVERY), ("all-reduce s32[8]{0}", OVER_A)
        ),
    }
    for why, text in refused.items():
        xla_split_places.new_job()
        error = load(monkeypatch, text)
        assert isinstance(error, str), text
        assert "of process 0 at place 1, where a group of this program's that starts" in error
        assert why.strip() in error and "(the groups [0 " in error, error


def test_a_place_is_judged_by_its_processs_devices_in_a_process_that_runs_none(monkeypatch):
    """jax's array_test test_jit_no_local_devices_named_sharding_collective: a program on
    process 1's 4 devices only, loaded in process 0 too, after a program over both
    processes that ran and whose group [10 12] puts device 12 where the later group
    [10 11 12 13] has 11. Process 0 judges that place as process 1 does (by process 1's
    devices in each program): admitted in both, not refused where none of it runs."""
    both = [SimpleNamespace(id=i, process_index=int(i >= 10)) for i in (0, 1, 2, 3, 10, 11, 12, 13)]
    earlier = module(
        op(
            "all-reduce",
            "channel_id=1, replica_groups={{0,2},{1,3},{4,6},{5,7}}, use_global_device_ids=true",
        ),
        extra=", num_partitions=8",
    )
    fake_program(monkeypatch, earlier, [], local_devices=4)
    executable = object()
    xla_subsets.check(both, executable)
    xla_split_places.first_run(executable)
    later = module(
        op("all-reduce", "channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true")
    )
    _, told = fake_program(monkeypatch, later, [], local_devices=4)
    xla_subsets.check(both[4:], object())  # process 0 (jax.process_index()) runs none of it
    assert told[0][1] == [[10, 11, 12, 13]]
