"""Processes that left the job: a process whose jax_accl stops (jax.distributed.shutdown(),
an exception or Ctrl-C ending the program) says so in jax.distributed's key-value store,
under ``jax_accl/v1/left/<process>``, before it closes its channels.

Its peers' calls on shared memory fail at once as its channels close
(xla_ffi/transport/ring_channel.cc); what waits in the store for it (the epoch agreement,
``jax_accl.recover()``) reads this notice and fails at once naming it, instead of waiting
for it to its deadline. A process started again under the same process id (a rejoin
under jax_enable_recoverability) withdraws its earlier incarnation's notice. Signed with
the job's key (jax_accl.signing), so that a stranger who reaches the coordinator cannot
end a recovery with a false one.
"""

from __future__ import annotations

import socket
import struct
import time

from jax_accl import _compat as c
from jax_accl import signing

_PREFIX = "jax_accl/v1/left"


def _key(process: int) -> str:
    return f"{_PREFIX}/{process}"


def announce(client, process: int, why: str) -> None:
    """Tells the other processes that `process` (this one) leaves, and why."""
    key = _key(process)
    try:
        client.key_value_set(key, signing.signed(key, why), allow_overwrite=True)
    except Exception:  # the store already gone with the job: the peers' channels say it
        pass


def withdraw(client, process: int) -> None:
    """An earlier incarnation's notice out of the store (this process is back)."""
    try:
        client.key_value_delete(_key(process))
    except Exception:  # none there
        pass


def why_left(client, process: int) -> str | None:
    """Why `process` left the job, or None while it has not said so (or the store is
    gone). One look, without waiting."""
    key = _key(process)
    try:
        found = dict(client.key_value_dir_get(_PREFIX + "/"))
    except Exception:
        return None
    value = found.get(key)
    return None if value is None else signing.verified_text(key, value)


_PROBE_EVERY_S = 1.0
# A reachability probe's hello (xla_ffi/transport/handshake.h: kProbeMagic, then the rest
# of the 64-byte Hello): the listener closes it without counting a refused connection,
# which a connection that says nothing would be (stats()["refused_connections"]).
PROBE_HELLO = struct.pack("<I", 0x424F5250).ljust(64, b"\0")
_probed: dict[int, float] = {}  # process -> when its listener was last probed
_table: list[dict] = []  # the running start-up's process table (jax_accl.distributed)


def know_table(table: list[dict] | None) -> None:
    global _table
    _table = list(table or [])
    _probed.clear()


def died_elsewhere(process: int) -> str | None:
    """Why `process`, on another host, is dead, or None while that is not known: its
    first rail's listener refuses connections (its host answers, its process is gone;
    a live process keeps its listeners open). Looked at most once a second per process;
    not under jax_enable_recoverability, where a process's jax_accl starts again on new
    ports (jax_accl.membership) and JAX's heartbeat says who is dead."""
    now = time.monotonic()
    table = _table
    if c.recoverability_enabled() or process >= len(table):
        return None
    if now - _probed.get(process, 0.0) < _PROBE_EVERY_S or not table[process]["rails"]:
        return None
    _probed[process] = now
    _, ip, port, _ = table[process]["rails"][0]
    try:
        with socket.create_connection((ip, port), timeout=_PROBE_EVERY_S) as probe:
            probe.sendall(PROBE_HELLO)  # into a fresh connection's empty buffer: at once
    except ConnectionRefusedError:
        return f"its listener at {ip}:{port} refuses connections: the process died"
    except OSError:  # no answer in time, or no route: the host may be gone, or slow
        return None
    return None


def left_message(process: int, why: str) -> str:
    return (
        f"process {process} left the job ({why}): it makes no more calls; restart the "
        f"job (or, under jax_enable_recoverability, go on with the processes "
        f"jax.experimental.multihost_utils.live_devices() names)"
    )
