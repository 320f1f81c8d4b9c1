"""The epoch agreement's and recover()'s waits and verdicts (jax_accl/recovery.py), and
the bootstrap's secret (jax_accl/distributed.py), against a fake key-value store: every
wait ends by its deadline, whether the keys it reads exist or not; a report of a call
finished where another process failed it is a disagreement, whatever the order of the
reports; a recover() that no peer joins fails by its deadline and withdraws its report;
a bootstrap that raises leaves no secret in the store. The same on real processes:
tests/multiprocess/test_recover_agreement.py."""

import threading
import time

import jax
import pytest

from jax_accl import distributed, membership, recovery, signing
from jax_accl.errors import AcclError


class FakeStore:
    """The calls of jax.distributed's client that jax_accl makes, on a dict."""

    def __init__(self):
        self.values, self.lock = {}, threading.Lock()

    def key_value_set(self, key, value, allow_overwrite=False):
        with self.lock:
            if key in self.values and not allow_overwrite:
                raise RuntimeError(f"ALREADY_EXISTS: {key}")
            self.values[key] = value

    def blocking_key_value_get(self, key, timeout_in_ms):
        end = time.monotonic() + timeout_in_ms / 1000
        while True:
            with self.lock:
                if key in self.values:
                    return self.values[key]
            if time.monotonic() >= end:
                raise RuntimeError(f"DEADLINE_EXCEEDED: {key}")
            time.sleep(0.005)

    def key_value_delete(self, key):
        with self.lock:
            self.values.pop(key, None)

    def signed(self, key, value):
        self.key_value_set(key, signing.signed(key, value), allow_overwrite=True)


@pytest.fixture
def store(monkeypatch):
    store = FakeStore()
    monkeypatch.setattr(signing, "_signing_key", b"the job's key")
    monkeypatch.setattr(recovery.c, "distributed_client", lambda: store)
    return store


GROUP, EPOCH = 0x1234, 3


def test_a_commit_whose_keys_exist_but_never_agree_ends_by_its_deadline(store):
    # The peer's commit exists and stays behind ours forever (it left, or it is stuck):
    # before, phase 2 read it again and again past the deadline while the native caller
    # held the communicator's lock.
    store.signed(recovery._key(GROUP, EPOCH, "commit", 1), "5")
    waiter = recovery._Waiter(store, 0, EPOCH, 1.0, -1)
    mine = recovery._key(GROUP, EPOCH, "commit", 0)
    began = time.monotonic()
    start = recovery._commit(store, waiter, mine, GROUP, EPOCH, [1], 7)
    took = time.monotonic() - began
    assert start == -1
    assert 0.9 < took < 5, took
    assert "did not commit the same start of epoch 3" in waiter.why, waiter.why
    assert "process 0 commits call 7, process 1 call 5" in waiter.why, waiter.why


def test_an_epoch_agreement_whose_commits_never_agree_fails_by_its_deadline(store):
    store.signed(recovery._key(GROUP, EPOCH, "announce", 1), "4 5")
    store.signed(recovery._key(GROUP, EPOCH, "commit", 1), "5")
    began = time.monotonic()
    why, start = recovery.agree_on_epoch(GROUP, EPOCH, 4, 7, [0, 1], 0, 1.0, -1)
    assert time.monotonic() - began < 5
    assert start == 0 and "did not commit the same start" in why, why
    # Left, it withdrew its commit: nobody starts on it.
    assert recovery._key(GROUP, EPOCH, "commit", 0) not in store.values


def test_an_agreement_that_agrees_is_not_held_up(store):
    store.signed(recovery._key(GROUP, EPOCH, "announce", 1), "4 9")
    store.signed(recovery._key(GROUP, EPOCH, "commit", 1), "9")
    assert recovery.agree_on_epoch(GROUP, EPOCH, 4, 7, [0, 1], 0, 5.0, -1) == ("", 9)


def test_a_read_past_its_deadline_looks_once_and_ends(store):
    waiter = recovery._Waiter(store, 0, EPOCH, 0.0, -1)
    began = time.monotonic()
    why, value = waiter.read("absent", 1, "announce")
    assert value is None and "did not announce epoch 3" in why
    assert time.monotonic() - began < 1
    store.key_value_set("present", "x")
    assert waiter.read("present", 1, "announce") == ("", "x")


def position(epoch, nxt, failed):
    return ({0, 1, 2}, epoch, nxt, failed)


LANE = 77


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0), (1, 2, 0)])
def test_a_call_finished_where_another_process_failed_it_is_a_disagreement(order):
    # Process 1 failed call 4; process 2 made it and went on without a failure (it
    # finished the call from its buffers); process 0 had not reached it.
    positions = {0: position(0, 4, -1), 1: position(0, 5, 4), 2: position(0, 6, -1)}
    reports = {p: {LANE: positions[p]} for p in order}  # each process reads them so
    with pytest.raises(AcclError) as raised:
        recovery._agreed_lanes(reports)
    assert str(raised.value) == (
        "jax_accl.recover(): the processes disagree on which call failed: process 1 failed "
        "call 4 of the op, process 2 finished it (its next call is 6; one of them finished a "
        "call the other failed); they cannot go on in step, so the program must restart "
        "them: restart the job from a checkpoint"
    )


def test_a_process_short_of_the_failed_call_is_moved_to_it():
    reports = {0: {LANE: position(0, 4, -1)}, 1: {LANE: position(0, 5, 4)}}
    assert recovery._agreed_lanes(reports) == {LANE: ({0, 1, 2}, 0, 5, 4)}
    reports = {0: {LANE: position(0, 5, -1)}, 1: {LANE: position(0, 6, -1)}}
    assert recovery._agreed_lanes(reports) == {LANE: ({0, 1, 2}, 0, 6, -1)}


@pytest.mark.parametrize(
    "positions, words",
    [
        ({0: position(0, 5, 4), 1: position(0, 6, 5)}, "process 0 failed call 4 of the op"),
        ({0: position(1, 5, -1), 1: position(0, 5, -1)}, "process 0 is in epoch 1"),
    ],
)
def test_other_disagreements_raise(positions, words):
    with pytest.raises(AcclError, match=words):
        recovery._agreed_lanes({p: {LANE: pos} for p, pos in positions.items()})


def test_different_resume_steps_raise():
    recovery._check_steps({0: 3, 1: 3})
    recovery._check_steps({0: None, 1: None})
    with pytest.raises(AcclError, match="process 0 from step 3, process 1 from step 6"):
        recovery._check_steps({1: 6, 0: 3})
    with pytest.raises(AcclError, match="process 1 from no step given"):
        recovery._check_steps({0: 3, 1: None})


def peer_recovers(store, process, generation, body="- -"):
    """What a peer's recover() of `generation` publishes."""
    store.signed(recovery._report_key(generation, process), body)
    store.signed(recovery._latest_key(process), str(generation))


@pytest.fixture
def process_0_of_2(monkeypatch):
    monkeypatch.setattr(jax, "process_index", lambda: 0)
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    monkeypatch.setattr(recovery, "_published", set())


def test_a_recover_no_peer_joins_fails_by_its_deadline_and_withdraws(
    store, process_0_of_2, monkeypatch
):
    # Both called it 4 times; this process calls it once more.
    monkeypatch.setattr(recovery, "_recover_generation", 4)
    peer_recovers(store, 1, 4)
    began = time.monotonic()
    with pytest.raises(AcclError, match="process 1 did not call it within 1 s"):
        recovery.recover(timeout_s=1.0)
    assert 0.9 < time.monotonic() - began < 5
    assert recovery._report_key(5, 0) not in store.values  # no later call pairs with it
    # The peer's next call (generation 5) and ours (6) meet at 6: nobody waits in vain.
    threading.Timer(0.5, lambda: peer_recovers(store, 1, 5)).start()
    threading.Timer(1.0, lambda: peer_recovers(store, 1, 6)).start()
    began = time.monotonic()
    assert recovery.recover(timeout_s=10.0) == {"lanes": 0, "moved": 0}
    assert time.monotonic() - began < 5
    assert recovery._recover_generation == 6


def test_a_recover_joins_a_peer_that_called_it_once_more(store, process_0_of_2, monkeypatch):
    monkeypatch.setattr(recovery, "_recover_generation", 2)
    peer_recovers(store, 1, 5, "3 -")  # further on; resumes from step 3
    assert recovery.recover(timeout_s=5.0, resume_from=3) == {"lanes": 0, "moved": 0}
    assert recovery._recover_generation == 5
    mine = store.values[recovery._report_key(5, 0)]
    assert signing.verified_text(recovery._report_key(5, 0), mine) == "3 -"
    assert recovery._report_key(3, 0) not in store.values  # the generation it left


def test_a_report_of_another_job_is_refused(store, process_0_of_2, monkeypatch):
    monkeypatch.setattr(recovery, "_recover_generation", 0)
    store.key_value_set(recovery._report_key(1, 1), "- - 0123")
    with pytest.raises(AcclError, match="not signed with the job's secret"):
        recovery.recover(timeout_s=2.0)


def test_the_secret_leaves_the_store_when_bootstrap_raises(monkeypatch):
    store = FakeStore()
    monkeypatch.setattr(distributed.c, "distributed_client", lambda: store)
    monkeypatch.setattr(jax, "process_index", lambda: 0)
    monkeypatch.setattr(jax, "process_count", lambda: 2)

    def no_rails():
        raise AcclError("no such interface: eth9")

    monkeypatch.setattr(distributed.rails_lib, "resolve", no_rails)
    with pytest.raises(AcclError, match="eth9"):
        distributed._start()
    assert "jax_accl/v1/secret" not in store.values


class DirStore(FakeStore):
    def key_value_dir_get(self, prefix):
        with self.lock:
            return [(k, v) for k, v in self.values.items() if k.startswith(prefix)]


def test_a_restart_tried_again_reads_nothing_of_the_last_try(monkeypatch):
    """A restart among the live processes (jax_accl.membership) whose start-up failed is
    tried again under the same name: the new try must not read the last one's failure
    marks (process 0's here, which would end its wait for the secret at once) nor its
    secret, and its own keys are the ones it waits on."""
    store = DirStore()
    monkeypatch.setattr(distributed.c, "distributed_client", lambda: store)
    monkeypatch.setattr(jax, "process_index", lambda: 1)
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    for name, value in (("_table", None), ("_members", None), ("_running", None)):
        monkeypatch.setattr(distributed, name, value)
    monkeypatch.setattr(distributed.xla_split_places, "new_job", lambda: None)
    monkeypatch.setattr(distributed, "_stop_with_jax_distributed", lambda: None)
    joined = []

    def join(client, index, count, secret, wire, timeout_ms, members):
        joined.append((secret, members.prefix))
        return [{"process": 0}, {"process": 1}]

    monkeypatch.setattr(distributed, "_join", join)
    base = distributed.generation_prefix("restart-x")
    # The groups XLA holds here, published once per restart (jax_accl.membership), before
    # its first try: the next try's process that came back reads them.
    store.key_value_set(f"{base}/held/1", "[]")
    # The first try: process 0 failed to start, and says so.
    store.key_value_set(f"{base}/try/1/failed/0", "process 0's rails are gone")
    with pytest.raises(AcclError, match="process 0 failed to start: process 0's rails"):
        distributed.restart_among([0, 1], "restart-x")
    assert joined == []
    assert store.values.get(f"{base}/held/1") == "[]"  # kept for the next try

    # Tried again: process 0 publishes this try's secret later than one look (0.5 s).
    def publish():
        time.sleep(distributed._LOOK_S + 0.3)
        store.key_value_set(f"{base}/try/2/wire", '{"model": null}')
        store.key_value_set(f"{base}/try/2/secret", "the second try's secret")

    late = threading.Thread(target=publish)
    late.start()
    distributed.restart_among([0, 1], "restart-x")
    late.join()
    assert joined == [("the second try's secret", f"{base}/try/2")]
    assert distributed._table == [{"process": 0}, {"process": 1}]


def test_a_process_that_stayed_publishes_its_held_groups_at_every_try(monkeypatch):
    """A process that knew the live processes before a restart stayed, even when the
    restart's last try failed and left its jax_accl stopped: the next try publishes the
    groups XLA holds here again (a process that came back takes them) and takes none."""
    published, taken, restarts = [], [], []
    monkeypatch.setattr(jax, "process_index", lambda: 0)
    monkeypatch.setattr(membership.distributed, "_table", None)  # the last try failed
    monkeypatch.setattr(membership.distributed, "restart_among", lambda p, n: restarts.append(p))
    monkeypatch.setattr(membership, "_publish_held_groups", published.append)
    monkeypatch.setattr(membership, "_take_held_groups", lambda n, o: taken.append(n))
    monkeypatch.setattr(membership, "_known", {0: 1, 1: 1})
    membership._on_live({0: 1, 1: 2})  # process 1 came back (a new incarnation)
    assert restarts == [[0, 1]] and len(published) == 1 and taken == []
