"""Going on after a failed call: epochs agreed through jax.distributed, and abort().

When a jax_accl call fails (the ranks called different shapes, a peer timed out or
died, ``abort()``), every rank of the group raises and the group's channels are
poisoned. The group's next call in each process first starts a new *epoch*, agreed in
two phases in jax.distributed's key-value store under
``jax_accl/v1/epoch/<group>/<epoch>/``:

1. each process announces which call of the group failed and which call it is in now
   (``announce/<process>``), and waits for every other process's announcement;
2. each commits the call the new epoch starts at: the latest call any process is in
   (``commit/<process>``), raising its commit whenever it sees a later one, until every
   process commits the same call S.

Then calls from S on run on fresh channels (new TCP connections, new shared-memory
segments; the epoch is in every frame, and a call's index in every call tag), and a
process whose current call is before S fails it at once: a peer is already further on
(it came late, or it left an earlier agreement by its deadline, which failed that call
there). So calls pair up by their index, which counts the same steps on every process,
and no step is reduced with another. A process that leaves an agreement (its deadline,
abort()) consumed that call; its next call announces again, later, and the others
follow it. Processes that name different failed calls disagree on which steps
happened (one finished a call another failed): the agreement fails on all of them,
saying so. Every value is signed with a key derived from the job's secret, so that a
stranger who reaches the coordinator cannot steer a recovery.
"""

from __future__ import annotations

import hashlib
import hmac
import time

from jax_accl import _accl, config
from jax_accl import _compat as c
from jax_accl.errors import AcclError

_PREFIX = "jax_accl/v1/epoch"
_SLICE_S = 0.25  # a wait in the store re-checks abort() this often


def abort() -> None:
    """Make every pending jax_accl call of this process fail at once, naming abort().

    Callable from any thread (a watchdog, a signal handler's thread). The calls fail
    within a few milliseconds with an error that says they were aborted, their peers in
    other processes fail as their channels break, and the next call of each group
    recovers on fresh channels. Calls that start after abort() are not affected."""
    _accl.abort()


_signing_key = b""


def set_secret(secret: str) -> None:
    """The job's secret (jax_accl/distributed.py): epoch values are signed with a key
    derived from it."""
    global _signing_key
    _signing_key = hmac.new(secret.encode(), b"jax_accl epoch agreement", hashlib.sha256).digest()


def _key(group: int, epoch: int, kind: str, process: int) -> str:
    return f"{_PREFIX}/{group:016x}/{epoch}/{kind}/{process}"


def _signed(key: str, value: str) -> str:
    tag = hmac.new(_signing_key, f"{key}={value}".encode(), hashlib.sha256).hexdigest()
    return f"{value} {tag}"


def _verified_text(key: str, signed: str) -> str | None:
    """A signed value's text, or None when its signature is not the job's."""
    *fields, tag = signed.split(" ")
    value = " ".join(fields)
    want = hmac.new(_signing_key, f"{key}={value}".encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(tag.encode(), want.encode()):  # bytes: any text compares
        return None
    return value


def _verified(key: str, signed: str) -> list[int] | None:
    """The integers of a signed value, or None when its signature is not the job's."""
    value = _verified_text(key, signed)
    try:
        return None if value is None else [int(f) for f in value.split(" ")]
    except ValueError:
        return None


def _unsigned(what: str, process: int, epoch: int) -> str:
    return (
        f"the {what} of process {process} for epoch {epoch} is not signed with the job's "
        f"secret: refusing it"
    )


class _Waiter:
    """Reads keys of the store within the agreement's deadline, noticing abort()."""

    def __init__(self, client, me, epoch, timeout_s, generation, late=""):
        self.client, self.me, self.epoch, self.generation = client, me, epoch, generation
        self.deadline = time.monotonic() + timeout_s
        self.why = ""  # why phase 2 ended without an agreement
        self.late = late  # what a process that never came means, if not an epoch's

    def read(self, key: str, process: int, waiting_for: str) -> tuple[str, str | None]:
        """(why not, value): the value of `key` once it exists, or why it did not come."""
        final_look = False
        while True:
            if self.generation >= 0 and _accl.abort_generation() != self.generation:
                return (
                    f"aborted by jax_accl.abort() while process {self.me} waited for process "
                    f"{process} to {waiting_for} epoch {self.epoch}"
                ), None
            left = self.deadline - time.monotonic()
            if left <= 0 and not final_look:
                final_look = True  # one last look: it may have come while we slept
                left = 0.001
            elif left <= 0 and self.late:
                return self.late.format(process=process), None
            elif left <= 0:
                return (
                    f"process {process} did not {waiting_for} epoch {self.epoch} within the "
                    f"call's timeout (JAX_ACCL_TIMEOUT_S): it has not failed a call of this "
                    f"group yet (its next call fails at once on the poisoned channels and "
                    f"then joins), it is late, or it is gone"
                ), None
            try:
                value = self.client.blocking_key_value_get(
                    key, max(1, int(min(left, _SLICE_S) * 1000))
                )
            except Exception as e:  # a slice that ended without the key: look again
                if "DEADLINE_EXCEEDED" not in str(e) and "timed out" not in str(e).lower():
                    return f"jax.distributed's key-value store failed: {e}", None
                continue
            return "", value


def agree_on_epoch(
    group: int,
    epoch: int,
    failed_call: int,
    call: int,
    processes: list,
    me: int,
    timeout_s: float,
    generation: int,
) -> tuple[str, int]:
    """Agrees with every other process of `processes` to start `epoch` of `group` after
    call `failed_call` failed, this process now being in call `call` (see the top of this
    file). Returns ("", S) once they all committed epoch start S, else (why not, 0).
    Called by jax_accl's native core on a device thread (xla_ffi/bindings/module.cc)."""
    client = c.distributed_client()
    if client is None:
        return "jax.distributed is not initialized (or already shut down)", 0
    others = [p for p in processes if p != me]
    waiter = _Waiter(client, me, epoch, timeout_s, generation)
    mine = _key(group, epoch, "announce", me)
    client.key_value_set(mine, _signed(mine, f"{failed_call} {call}"), allow_overwrite=True)
    start = call
    for process in others:  # phase 1: every process's announcement
        key = _key(group, epoch, "announce", process)
        why, value = waiter.read(key, process, "announce")
        if why:
            return why, 0
        fields = _verified(key, value)
        if fields is None or len(fields) != 2:
            return _unsigned("announcement", process, epoch), 0
        theirs, their_call = fields
        if theirs != failed_call:
            return (
                f"the processes disagree on which call failed: process {me} failed call "
                f"{failed_call} of the group, process {process} call {theirs} (one of them "
                f"finished a call the other failed); they cannot go on in step, so the "
                f"program must restart them (from a checkpoint)"
            ), 0
        start = max(start, their_call)
    commit = _key(group, epoch, "commit", me)
    try:
        start = _commit(client, waiter, commit, group, epoch, others, start)
    except BaseException:  # leaving: withdraw the commit, so that nobody starts on it
        _withdraw(client, commit)
        raise
    if start < 0:
        _withdraw(client, commit)
        return waiter.why, 0
    # Every process has left epoch - 1, so nobody reads this process's keys of it again.
    if epoch > 1:
        for kind in ("announce", "commit"):
            _withdraw(client, _key(group, epoch - 1, kind, me))
    return "", start


def _withdraw(client, key: str) -> None:
    try:
        client.key_value_delete(key)
    except Exception:  # the store may be going away with the job: nothing to keep
        pass


def _commit(client, waiter, commit: str, group: int, epoch: int, others: list, start: int) -> int:
    """Phase 2: commits `start`, raised to the latest any process commits, until every
    process commits the same; returns it, or -1 (waiter.why says why)."""
    committed = -1
    while True:
        if committed != start:
            client.key_value_set(commit, _signed(commit, str(start)), allow_overwrite=True)
            committed = start
        behind = False
        for process in others:
            key = _key(group, epoch, "commit", process)
            why, value = waiter.read(key, process, "commit to")
            fields = None if why else _verified(key, value)
            if not why and (fields is None or len(fields) != 1):
                why = _unsigned("commit", process, epoch)
            if why:
                waiter.why = why
                return -1
            start, behind = max(start, fields[0]), behind or fields[0] < start
        if committed == start and not behind:
            return start
        time.sleep(0.02)  # a peer still commits an earlier start: it raises it on seeing ours


_recover_generation = 0


def recover(timeout_s: float | None = None) -> dict:
    """After a failed step, before running it again: every process of the job calls it,
    and it returns once their jax_accl calls count the same steps again.

    A launch that fails does not always make the same calls in every process (XLA does
    not start calls after a failed one, while an independent call may already run in
    another process): the calls of that op would then no longer count the same steps,
    and a step run again could be reduced with a different step of a peer. recover()
    waits until this process has no jax_accl call in flight, then the processes report
    every op's position (epoch, the latest call reached, the failed call) in
    jax.distributed's key-value store, signed, and each moves its ops to the latest
    call; the next call of an op that failed anywhere starts a new epoch, as after any
    failed call. Returns {"lanes": ops agreed on, "moved": ops this process moved}.

    Raises AcclError naming the process it waited for in vain within `timeout_s`
    (default 2 x JAX_ACCL_TIMEOUT_S + 30 s: a peer may still wait out a call of the
    failed launch that this process never made), or when the processes disagree on
    which calls failed (restart the job then). One process: nothing to align."""
    global _recover_generation
    client = c.distributed_client()
    if client is None:
        return {"lanes": 0, "moved": 0}
    timeout_s = 2 * config.current().timeout_s + 30 if timeout_s is None else timeout_s
    deadline = time.monotonic() + timeout_s
    while _accl.stats()["calls_in_flight"] > 0:
        if time.monotonic() > deadline:
            raise AcclError(
                f"jax_accl.recover(): {_accl.stats()['calls_in_flight']} jax_accl calls of this "
                f"process still run after {timeout_s:g} s; wait for the failed step's outputs "
                f"(or the steps dispatched after it) before recovering"
            )
        time.sleep(0.01)
    import jax

    me, count = jax.process_index(), jax.process_count()
    _recover_generation += 1
    generation = _recover_generation
    mine = {
        lane: (set(ps), epoch, nxt, failed)
        for lane, ps, epoch, nxt, failed in _accl.lane_positions()
    }
    key = f"{_PREFIX}/recover/{generation}/{me}"
    text = " ".join(
        f"{lane}:{epoch}:{nxt}:{failed}:{','.join(map(str, sorted(ps)))}"
        for lane, (ps, epoch, nxt, failed) in sorted(mine.items())
    )
    client.key_value_set(key, _signed(key, text or "-"), allow_overwrite=True)
    late = (
        f"jax_accl.recover() (call {generation} of it) in process {me}: process {{process}} "
        f"did not call it within {timeout_s:g} s (every process of the job calls it after a "
        f"failed step; a process that died, or did not see the step fail, means restarting "
        f"the job)"
    )
    waiter = _Waiter(client, me, 0, max(0.0, deadline - time.monotonic()), -1, late)
    agreed = dict(mine)  # lane -> (processes, epoch, next call, failed call)
    for process in (p for p in range(count) if p != me):
        theirs = f"{_PREFIX}/recover/{generation}/{process}"
        why, value = waiter.read(theirs, process, "recover")
        if why:
            raise AcclError(why)
        body = _verified_text(theirs, value)
        if body is None:
            raise AcclError(
                f"jax_accl.recover(): the report of process {process} is not signed with the "
                "job's secret"
            )
        for entry in body.split(" ") if body != "-" else []:
            lane, epoch, nxt, failed, ps = entry.split(":")
            lane, epoch, nxt, failed = int(lane), int(epoch), int(nxt), int(failed)
            ps = {int(p) for p in ps.split(",")}
            if lane not in agreed:
                agreed[lane] = (ps, epoch, nxt, failed)
                continue
            _, our_epoch, our_next, our_failed = agreed[lane]
            if our_epoch != epoch or -1 not in (failed, our_failed) and failed != our_failed:
                raise AcclError(
                    f"jax_accl.recover(): processes {me} and {process} disagree on an op's "
                    f"failed calls (epoch {our_epoch}, failed call {our_failed}; epoch {epoch}, "
                    f"failed call {failed}; -1: none): they cannot go on in step; restart the "
                    f"job from a checkpoint"
                )
            agreed[lane] = (ps, epoch, max(nxt, our_next), max(failed, our_failed))
    moved = 0
    for lane, (ps, _, nxt, failed) in agreed.items():
        if me not in ps or (lane in mine and mine[lane][2:] == (nxt, failed)):
            continue  # another group's op, or already there
        _accl.align_lane(lane, nxt, failed)
        moved += 1
    if generation > 2:  # every process has read it: they all agreed on generation - 1
        _withdraw(client, f"{_PREFIX}/recover/{generation - 2}/{me}")
    return {"lanes": len(agreed), "moved": moved}
