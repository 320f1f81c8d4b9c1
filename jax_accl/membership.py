"""Processes that come back: jax_accl under JAX's fault-tolerance API
(``jax_enable_recoverability``, ``jax.experimental.multihost_utils.live_devices``).

A process that dies leaves its peers' calls failing at once (its channels break); the
survivors' next programs run on a mesh of the live devices, whose groups are new ones
with channels of their own, so nothing is needed for that. A process started again under
its process id is a new *incarnation* (jax.distributed's coordination service counts
them): it starts with no channels, no lanes and no call counts, while its peers still
hold those of the dead one. So when the live processes, as ``live_devices`` reports them
(its barrier: every live process gets the same answer at the same point of its
program), include an incarnation this process has not seen, every live process starts
jax_accl afresh among them (``jax_accl.distributed.restart_among``): a new secret, new
listeners and channels, every lane's calls counted from zero, under store keys named by
that set of incarnations. So the newcomer's calls pair only with calls made after the
restart, in every process.

This hooks jax's query of the live processes (``_compat.hook_live_devices``); it runs
where that query runs: entering the first ``live_devices`` block and leaving every one.
"""

from __future__ import annotations

import hashlib
import json

import jax

from jax_accl import _compat as c
from jax_accl import distributed, log, xla_subsets

_known: dict[int, int] | None = None  # process -> incarnation, as live_devices last said


def install() -> None:
    c.hook_live_devices(_on_live)
    c.hook_distributed_state(before_shutdown=_forget)


def _forget() -> None:
    """jax.distributed shuts down: a job initialized after it has incarnations of its own."""
    global _known
    _known = None


def _on_live(live: dict[int, int]) -> None:
    """`live`: every live process of the query -> its incarnation."""
    global _known
    previous = _known
    if previous is None:
        if not distributed.rejoining():
            _known = dict(live)
            return  # the job's first start (now or later) includes every process
        came = sorted(live)  # this process is back: it joins the live ones
    else:
        came = sorted(p for p, incarnation in live.items() if previous.get(p) != incarnation)
    if not came:
        _known = dict(live)
        return
    name = _name(live)
    log.logger.info(
        "jax_accl: process(es) %s (re)joined; starting afresh among processes %s (%s)",
        came,
        sorted(live),
        name,
    )
    # It stayed if it knew the live processes before (a restart tried again after a
    # failure, whose jax_accl is stopped, included): it publishes the groups XLA holds
    # here, and a process that came back takes them.
    stayed = previous is not None
    if stayed:
        _publish_held_groups(name)
    distributed.restart_among(sorted(live), name)
    if not stayed:
        _take_held_groups(name, [p for p in live if p != jax.process_index()])
    _known = dict(live)  # not before: a restart that failed is tried again next time


# XLA's own collectives (JAX_ACCL_XLA_COLLECTIVES=1) keep a communicator per group of
# devices for the life of XLA:CPU's client (xla/backends/cpu/collectives/cpu_cliques.cc,
# AcquireCommunicator: made once per clique key and rank; the key has no incarnation):
# the processes that stayed never split a group again, while the process that came back
# splits it anew. So they tell it the groups they hold (jax_accl.xla_subsets), and its
# splits of those are made without them, on the same lanes.
def _held_key(name: str, process: int) -> str:
    return f"{distributed.generation_prefix(name)}/held/{process}"


def _publish_held_groups(name: str) -> None:
    if xla_subsets.in_use():
        key = _held_key(name, jax.process_index())
        c.distributed_client().key_value_set(
            key, json.dumps(xla_subsets.held_groups()), allow_overwrite=True
        )


def _take_held_groups(name: str, others: list[int]) -> None:
    """After the restart, whose start-up waited for every entry (each published after
    its held groups): the groups that include this process's devices."""
    if not xla_subsets.in_use():
        return
    client, mine = c.distributed_client(), {d.id for d in jax.local_devices()}
    groups = {}
    for process in others:
        for lane, *devices in json.loads(client.key_value_try_get(_held_key(name, process))):
            if mine & set(devices):
                groups[tuple(devices)] = lane
    xla_subsets.split_before_rejoin([[lane, *devices] for devices, lane in groups.items()])


def _name(live: dict[int, int]) -> str:
    text = " ".join(f"{p}:{i}" for p, i in sorted(live.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
