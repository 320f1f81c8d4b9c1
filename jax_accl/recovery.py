"""Going on after a failed call: epochs agreed through jax.distributed, and abort().

When a jax_accl call fails (the ranks called different shapes, a peer timed out or
died, ``abort()``), every rank of the group raises and the group's channels are
poisoned. The group's next call in each process first starts a new *epoch*: the process
announces under ``jax_accl/v1/epoch/<group>/<epoch>/<process>`` in jax.distributed's
key-value store which call of the group failed, and waits, within the call's timeout,
for every other process of the group to announce the same call. Then the call runs on
fresh channels (new TCP connections, new shared-memory segments; the epoch is in every
frame), so nothing of the failed call can be mistaken for part of the new one
(xla_ffi/runtime/communicator.h). Processes that name different failed calls disagree
on which steps happened: the agreement fails on all of them, saying so.
"""

from __future__ import annotations

import time

from jax_accl import _accl
from jax_accl import _compat as c

_PREFIX = "jax_accl/v1/epoch"
_SLICE_S = 0.25  # a wait in the store re-checks abort() this often


def abort() -> None:
    """Make every pending jax_accl call of this process fail at once, naming abort().

    Callable from any thread (a watchdog, a signal handler's thread). The calls fail
    within a few milliseconds with an error that says they were aborted, their peers in
    other processes fail as their channels break, and the next call of each group
    recovers on fresh channels. Calls that start after abort() are not affected."""
    _accl.abort()


def _key(group: int, epoch: int, process: int) -> str:
    return f"{_PREFIX}/{group:016x}/{epoch}/{process}"


def agree_on_epoch(
    group: int,
    epoch: int,
    failed_call: int,
    processes: list,
    me: int,
    timeout_s: float,
    generation: int,
) -> str:
    """Announces that this process starts `epoch` of `group` after call `failed_call`
    failed, and waits until every other process of `processes` announced the same.
    Returns "" once they all have, else why not. Called by jax_accl's native core on a
    device thread (xla_ffi/bindings/module.cc)."""
    client = c.distributed_client()
    if client is None:
        return "jax.distributed is not initialized (or already shut down)"
    client.key_value_set(_key(group, epoch, me), str(failed_call), allow_overwrite=True)
    deadline = time.monotonic() + timeout_s
    for process in processes:
        if process == me:
            continue
        while True:
            if generation >= 0 and _accl.abort_generation() != generation:
                return (
                    f"aborted by jax_accl.abort() while process {me} waited for process "
                    f"{process} to start epoch {epoch}"
                )
            left = deadline - time.monotonic()
            if left <= 0:
                return (
                    f"process {process} did not start epoch {epoch} within the call's "
                    f"timeout (JAX_ACCL_TIMEOUT_S): it has not failed a call of this group "
                    f"yet (its next call fails at once on the poisoned channels and then "
                    f"joins), or it is gone"
                )
            try:
                theirs = client.blocking_key_value_get(
                    _key(group, epoch, process), max(1, int(min(left, _SLICE_S) * 1000))
                )
            except Exception as e:  # a slice that ended without the key: look again
                if "DEADLINE_EXCEEDED" not in str(e) and "timed out" not in str(e).lower():
                    return f"jax.distributed's key-value store failed: {e}"
                continue
            if int(theirs) != failed_call:
                return (
                    f"the processes disagree on which call failed: process {me} failed call "
                    f"{failed_call} of the group, process {process} call {theirs} (one of them "
                    f"finished a call the other failed); they cannot go on in step, so the "
                    f"program must restart them (from a checkpoint)"
                )
            break
    # Every process has left epoch - 1, so nobody reads this process's key of it again.
    if epoch > 1:
        try:
            client.key_value_delete(_key(group, epoch - 1, me))
        except Exception:  # the store may be going away with the job: nothing to keep
            pass
    return ""
