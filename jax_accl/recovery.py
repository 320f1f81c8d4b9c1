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

Both phases end by the call's deadline, whether the keys they read exist or not (the
native caller holds the group's communicator lock meanwhile).

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

import time

from jax_accl import _accl, config, departures
from jax_accl import _compat as c
from jax_accl.errors import AcclError
from jax_accl.signing import signed, verified_text

_PREFIX = "jax_accl/v1/epoch"
_SLICE_S = 0.25  # a wait in the store re-checks abort() this often


def abort() -> None:
    """Make every pending jax_accl call of this process fail at once, naming abort().

    Callable from any thread (a watchdog, a signal handler's thread). The calls fail
    within a few milliseconds with an error that says they were aborted, their peers in
    other processes fail as their channels break, and the next call of each group
    recovers on fresh channels. Calls that start after abort() are not affected."""
    _accl.abort()


def _key(group: int, epoch: int, kind: str, process: int) -> str:
    return f"{_PREFIX}/{group:016x}/{epoch}/{kind}/{process}"


def _verified(key: str, signed: str) -> list[int] | None:
    """The integers of a signed value, or None when its signature is not the job's."""
    value = verified_text(key, signed)
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
    """Reads keys of the store within the agreement's deadline, noticing abort(). Every
    wait of the agreement and of recover() ends by this deadline, whether the keys it
    waits for came or not: read() waits at most until it (then looks once more), and the
    loops that read again (phase 2, recover()'s generations) stop at expired()."""

    def __init__(self, client, me, epoch, timeout_s, generation):
        self.client, self.me, self.epoch, self.generation = client, me, epoch, generation
        self.deadline = time.monotonic() + timeout_s
        self.why = ""  # why phase 2 ended without an agreement

    def expired(self) -> bool:
        return time.monotonic() >= self.deadline

    def aborted(self, process: int, waiting_for: str) -> str:
        """Why not, when abort() was called since the agreement began; else ""."""
        if self.generation < 0 or _accl.abort_generation() == self.generation:
            return ""
        return (
            f"aborted by jax_accl.abort() while process {self.me} waited for process "
            f"{process} to {waiting_for} epoch {self.epoch}"
        )

    def never_came(self, process: int, waiting_for: str) -> str:
        return (
            f"process {process} did not {waiting_for} epoch {self.epoch} within the "
            f"call's timeout (JAX_ACCL_TIMEOUT_S): it has not failed a call of this "
            f"group yet (its next call fails at once on the poisoned channels and "
            f"then joins), it is late, or it is gone"
        )

    def read(self, key: str, process: int, waiting_for: str) -> tuple[str, str | None]:
        """(why not, value): the value of `key` once it exists, or why it did not come
        by the deadline (past it, one last look: it may have come while we slept)."""
        while True:
            why = self.aborted(process, waiting_for)
            if why:
                return why, None
            last = self.expired()
            try:
                value = self.get(key, _SLICE_S)
            except AcclError as e:
                return str(e), None
            if value is not None:
                return "", value
            left = departures.why_left(self.client, process)
            if left is not None:  # it never writes the key: no use waiting
                return departures.left_message(process, left), None
            if last:
                return self.never_came(process, waiting_for), None

    def get(self, key: str, slice_s: float) -> str | None:
        """One look at `key`, waiting up to `slice_s` but never past the deadline (past
        it, a millisecond): its value, or None."""
        left = min(slice_s, self.deadline - time.monotonic())
        try:
            return self.client.blocking_key_value_get(key, max(1, int(left * 1000)))
        except Exception as e:
            if "DEADLINE_EXCEEDED" not in str(e) and "timed out" not in str(e).lower():
                raise AcclError(f"jax.distributed's key-value store failed: {e}") from e
            return None

    def pause(self, seconds: float) -> None:
        """Sleeps before reading again, never past the deadline."""
        time.sleep(max(0.0, min(seconds, self.deadline - time.monotonic())))


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
    client.key_value_set(mine, signed(mine, f"{failed_call} {call}"), allow_overwrite=True)
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
    process commits the same; returns it, or -1 (waiter.why says why). Ends by the
    waiter's deadline also when every commit exists but they never agree."""
    committed = -1
    while True:
        if committed != start:
            client.key_value_set(commit, signed(commit, str(start)), allow_overwrite=True)
            committed = start
        theirs = {}
        for process in others:
            key = _key(group, epoch, "commit", process)
            why, value = waiter.read(key, process, "commit to")
            fields = None if why else _verified(key, value)
            if not why and (fields is None or len(fields) != 1):
                why = _unsigned("commit", process, epoch)
            if why:
                waiter.why = why
                return -1
            theirs[process] = fields[0]
        start = max(start, *theirs.values())
        if committed == start and all(s == start for s in theirs.values()):
            return start
        if waiter.expired():
            waiter.why = _no_common_start(waiter.me, epoch, committed, theirs)
            return -1
        waiter.pause(0.02)  # a peer still commits an earlier start: it raises it on seeing ours


def _no_common_start(me: int, epoch: int, committed: int, theirs: dict) -> str:
    seen = ", ".join(f"process {p} call {s}" for p, s in sorted(theirs.items()))
    return (
        f"the processes did not commit the same start of epoch {epoch} within the call's "
        f"timeout (JAX_ACCL_TIMEOUT_S): process {me} commits call {committed}, {seen} (a "
        f"process that left the agreement by its deadline no longer raises its commit)"
    )


_recover_generation = 0  # the latest generation of recover() this process took part in


def recover(timeout_s: float | None = None, *, resume_from: int | None = None) -> dict:
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
    failed call. `resume_from`, the step the caller runs again from (its checkpoint's),
    is compared too: every process must resume from the same step. Returns {"lanes": ops
    agreed on, "moved": ops this process moved}.

    Raises AcclError on every process, with the same message, when their reports
    disagree: on an op's epoch or failed call, when one process finished a call that
    another failed (their steps differ: the replicated state would diverge), or on
    `resume_from`; restart the job from a checkpoint then. Raises AcclError naming the
    process it waited for in vain within `timeout_s` (default 2 x JAX_ACCL_TIMEOUT_S +
    30 s: a peer may still wait out a call of the failed launch that this process never
    made). A process that calls it once more than its peers fails so by its deadline,
    and the next call of every process pairs up again. One process: nothing to align."""
    client = c.distributed_client()
    if client is None:
        return {"lanes": 0, "moved": 0}
    timeout_s = 2 * config.current().timeout_s + 30 if timeout_s is None else timeout_s
    deadline = time.monotonic() + timeout_s
    _wait_for_calls_in_flight(deadline, timeout_s)
    import jax

    me, count = jax.process_index(), jax.process_count()
    step = "-" if resume_from is None else str(int(resume_from))
    body = f"{step} {_lanes_text(_accl.lane_positions())}"
    reports = _exchange_reports(client, me, count, body, deadline, timeout_s)
    steps, lanes = {}, {}
    for process, text in reports.items():
        step, lanes_text = text.split(" ", 1)
        steps[process] = None if step == "-" else int(step)
        lanes[process] = _parse_lanes(lanes_text)
    agreed = _agreed_lanes(lanes)
    _check_steps(steps)
    mine, moved = lanes[me], 0
    for lane, (ps, _, nxt, failed) in agreed.items():
        if me not in ps or (lane in mine and mine[lane][2:] == (nxt, failed)):
            continue  # another group's op, or already there
        _accl.align_lane(lane, nxt, failed)
        moved += 1
    return {"lanes": len(agreed), "moved": moved}


def _wait_for_calls_in_flight(deadline: float, timeout_s: float) -> None:
    while _accl.stats()["calls_in_flight"] > 0:
        if time.monotonic() > deadline:
            raise AcclError(
                f"jax_accl.recover(): {_accl.stats()['calls_in_flight']} jax_accl calls of this "
                f"process still run after {timeout_s:g} s; wait for the failed step's outputs "
                f"(or the steps dispatched after it) before recovering"
            )
        time.sleep(0.01)


def _lanes_text(positions) -> str:
    """_accl.lane_positions() as the report's text: lane:epoch:next:failed:processes."""
    entries = sorted(
        (lane, epoch, nxt, failed, sorted(ps)) for lane, ps, epoch, nxt, failed in positions
    )
    text = " ".join(f"{i}:{e}:{n}:{f}:{','.join(map(str, ps))}" for i, e, n, f, ps in entries)
    return text or "-"


def _parse_lanes(text: str) -> dict:
    """A report's lanes: lane -> (processes, epoch, next call, failed call or -1)."""
    lanes = {}
    for entry in text.split(" ") if text != "-" else []:
        lane, epoch, nxt, failed, ps = entry.split(":")
        lanes[int(lane)] = ({int(p) for p in ps.split(",")}, int(epoch), int(nxt), int(failed))
    return lanes


def _report_key(generation: int, process: int) -> str:
    return f"{_PREFIX}/recover/{generation}/{process}"


def _latest_key(process: int) -> str:
    return f"{_PREFIX}/recover/latest/{process}"


_published: set[int] = set()  # the generations whose report of this process is in the store


def _exchange_reports(client, me, count, body, deadline, timeout_s) -> dict:
    """Every process's report of the same generation of recover(): {process: body}.

    A call takes the generation after the latest this process took part in, publishes
    its report under it and that generation as its latest, and reads every peer's
    report of that generation. Where a peer's report is not there but the peer's latest
    generation is later (it called recover() once more), the call joins that generation.
    A call that ends without every report withdraws its own, so that no later call pairs
    with it; the next call of every process then meets at the highest generation
    published, and none waits for a generation nobody writes. Ends by the deadline."""
    global _recover_generation
    generation = _recover_generation + 1
    _publish_report(client, me, generation, body)
    waiter = _Waiter(client, me, 0, max(0.0, deadline - time.monotonic()), -1)
    bodies = {me: body}
    try:
        while len(bodies) < count:
            furthest = generation
            missing = [p for p in range(count) if p not in bodies]
            for process in missing:
                value = waiter.get(_report_key(generation, process), _SLICE_S)
                if value is not None:
                    bodies[process] = _verified_report(_report_key(generation, process), value)
                else:
                    furthest = max(furthest, _latest_generation(waiter, process))
            if len(bodies) == count:
                break
            for process in missing:
                left = departures.why_left(client, process) or departures.died_elsewhere(process)
                if left is not None and process not in bodies:
                    raise AcclError(f"jax_accl.recover(): {departures.left_message(process, left)}")
            if waiter.expired():
                raise AcclError(_never_came(me, [p for p in missing if p not in bodies], timeout_s))
            if furthest > generation:  # a peer called recover() once more: join it
                generation, bodies = furthest, {me: body}
                _publish_report(client, me, generation, body)
    except BaseException:
        _recover_generation = generation  # never again: a peer may have read it
        _withdraw(client, _report_key(generation, me))
        _published.discard(generation)
        raise
    _recover_generation = generation
    # Every peer published this generation, so each has left the earlier ones: nobody
    # reads this process's earlier reports again.
    for old in sorted(g for g in _published if g < generation):
        _withdraw(client, _report_key(old, me))
        _published.discard(old)
    return bodies


def _publish_report(client, me: int, generation: int, body: str) -> None:
    key, latest = _report_key(generation, me), _latest_key(me)
    client.key_value_set(key, signed(key, body), allow_overwrite=True)
    _published.add(generation)
    client.key_value_set(latest, signed(latest, str(generation)), allow_overwrite=True)


def _verified_report(key: str, value: str) -> str:
    text = verified_text(key, value)
    if text is None:
        raise AcclError(f"jax_accl.recover(): the report {key} is not signed with the job's secret")
    return text


def _latest_generation(waiter, process: int) -> int:
    """The latest generation of recover() `process` took part in (0: none yet)."""
    value = waiter.get(_latest_key(process), 0.001)
    if value is None:
        return 0
    fields = _verified(_latest_key(process), value)
    if fields is None or len(fields) != 1:
        raise AcclError(
            f"jax_accl.recover(): the generation of process {process} is not signed with "
            "the job's secret"
        )
    return fields[0]


def _never_came(me: int, missing: list, timeout_s: float) -> str:
    who = f"process{'es' if len(missing) > 1 else ''} {', '.join(map(str, missing))}"
    return (
        f"jax_accl.recover() in process {me}: {who} did not call it within {timeout_s:g} s "
        f"(every process of the job calls it once after a failed step; a process that "
        f"died, or did not see the step fail, means restarting the job)"
    )


def _agreed_lanes(reports: dict) -> dict:
    """lane -> (processes, epoch, next call, failed call or -1) agreed from every
    process's report ({process: {lane: position}}), or AcclError where they disagree.
    Depends on the reports alone, so every process reaches the same verdict."""
    by_lane = {}
    for process in sorted(reports):
        for lane, position in reports[process].items():
            by_lane.setdefault(lane, {})[process] = position
    return {lane: _agree_on_lane(positions) for lane, positions in sorted(by_lane.items())}


def _agree_on_lane(positions: dict) -> tuple:
    """One op's agreed position from {process: (processes, epoch, next, failed)}."""
    first = min(positions)
    ps, epoch = positions[first][0], positions[first][1]
    for process, (_, their_epoch, _, _) in sorted(positions.items()):
        if their_epoch != epoch:
            raise _disagree(
                f"an op's epoch: process {first} is in epoch {epoch}, process {process} in "
                f"epoch {their_epoch}"
            )
    failed = {p: f for p, (_, _, _, f) in sorted(positions.items()) if f >= 0}
    if failed:
        p, g = next(iter(failed.items()))
        for q, h in failed.items():
            if h != g:
                raise _disagree(
                    f"which call failed: process {p} failed call {g} of the op, process {q} "
                    f"call {h} (one of them finished a call the other failed)"
                )
        for q, (_, _, nxt, f) in sorted(positions.items()):
            if f < 0 and nxt > g:
                raise _disagree(
                    f"which call failed: process {p} failed call {g} of the op, process {q} "
                    f"finished it (its next call is {nxt}; one of them finished a call the "
                    f"other failed)"
                )
    nxt = max(n for _, _, n, _ in positions.values())
    return ps, epoch, nxt, next(iter(failed.values()), -1)


def _disagree(what: str) -> AcclError:
    return AcclError(
        f"jax_accl.recover(): the processes disagree on {what}; they cannot go on in "
        f"step, so the program must restart them: restart the job from a checkpoint"
    )


def _check_steps(steps: dict) -> None:
    """Raises where the processes would resume from different steps ({process: step or
    None})."""
    if len(set(steps.values())) > 1:
        said = ", ".join(
            f"process {p} from {'no step given' if s is None else f'step {s}'}"
            for p, s in sorted(steps.items())
        )
        raise AcclError(
            f"jax_accl.recover(): the processes would resume from different steps ({said}): "
            f"their replicated state would diverge; restart the job from a checkpoint"
        )
