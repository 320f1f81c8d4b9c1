"""Multi-process bootstrap through JAX's own distributed runtime.

After ``jax.distributed.initialize()``, the first jax_accl collective lowered in a
multi-process program calls ``ensure_started()``. Every process then

1. gets the job's secret, wire and rail choice: process 0 draws the secret and puts it,
   its wire calibration (``jax_accl.cost_model``, or none) and its JAX_ACCL_RAIL_CHOICE in
   jax.distributed's key-value store, and the others read them: connections that cannot
   prove they know the secret are refused (xla_ffi/transport/handshake.h); every process
   plans by process 0's wire and stripes by it and its choice over every rail or the
   first (``jax_accl.rails.paying``). Process 0 deletes the secret and the wire from the
   store once every process has published its entry (step 3), which each does after
   reading them. Each rail carries process 0's count of connections per peer
   (JAX_ACCL_STRIPES_PER_RAIL; `auto`: what process 0's probe of the wire to another
   host found pays, jax_accl.stripes);
2. opens a TCP listener on each of its rails (``jax_accl.rails``);
3. publishes its host (the hostname, or ``JAX_ACCL_HOST_ID``), its rails and ports and
   its devices under ``jax_accl/v1/process/<index>``, and reads everybody else's.

Processes with the same host id talk through shared memory, the others over TCP on
every rail. After a failed call, the processes of a group agree on a new epoch through
the same store (``jax_accl.recovery``). No server of our own: only the coordination
service's key-value store.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import secrets
import socket
import threading
import time

import jax

from jax_accl import (
    _accl,
    config,
    cost_model,
    departures,
    log,
    recovery,
    signing,
    stripes,
    xla_split_places,
)
from jax_accl import _compat as c
from jax_accl import rails as rails_lib
from jax_accl.errors import AcclError

_PREFIX = "jax_accl/v1"
_lock = threading.Lock()
_table: list[dict] | None = None
_stripes: dict = {}
# How long the coordinator's service outlives its client at shutdown (_compat's why).
_SERVICE_GRACE_S = 0.3
# And how long its stopping then takes, at most, as a client waits for it (_outlast_service).
_SERVICE_STOPS_S = 0.7


def host_id() -> str:
    return config.value("JAX_ACCL_HOST_ID") or socket.gethostname()


def ensure_started() -> list[dict]:
    """Set up the process table once per process (collective: every process must call)."""
    global _table
    with _lock:
        if _table is None:
            if _members is None and rejoining():
                raise AcclError(
                    f"jax_accl: process {jax.process_index()} was started again in a job "
                    f"whose jax_accl runs (jax_enable_recoverability): it joins the live "
                    f"processes at its first jax.experimental.multihost_utils."
                    f"live_devices(), which must come before its first collective"
                )
            _table = _start(_members)
            _stop_with_jax_distributed()
        return _table


# Where every process says it started jax_accl in this job (rejoining() reads it).
STARTED_PREFIX = f"{_PREFIX}/started/"


def rejoining() -> bool:
    """Whether this process, not started yet, was started again in a job whose other
    processes' jax_accl already runs (jax_enable_recoverability): it then starts with the
    live processes (jax_accl.membership), never with the job's first start-up, whose
    keys are gone."""
    client = c.distributed_client()
    if _table is not None or client is None or not c.recoverability_enabled():
        return False
    try:
        return bool(client.key_value_dir_get(STARTED_PREFIX))
    except Exception:
        return False


# The processes a start-up waits for and the store's keys it uses: every process of the
# job under _PREFIX at the job's first start; after a process came back (a rejoin under
# jax_enable_recoverability: jax_accl.membership), the live processes only, under a
# prefix of their own (_Members.prefix), so that nothing of an earlier start is read.
# A restart tried again (its start-up failed; every live process tries it again, as
# many times) has keys of its own too: `base` (the live set's), then the try's number,
# so it never reads the last try's secret, endpoints or failure marks (_failed_dir).
class _Members:
    def __init__(self, processes: list[int], base: str, restart: bool = False):
        self.processes, self.base, self.restart, self.tries = processes, base, restart, 0

    @property
    def prefix(self) -> str:
        return f"{self.base}/try/{self.tries}" if self.restart else self.base

    def next_try(self) -> None:
        """A start-up with these members begins (collective: counted alike everywhere)."""
        self.tries += 1


_members: _Members | None = None


def generation_prefix(name: str) -> str:
    return f"{_PREFIX}/gen/{name}"


def restart_among(processes: list[int], name: str) -> None:
    """jax_accl started again, among `processes` (the live ones, this one among them),
    with keys under `name`: the World stops (its channels, lanes and call counts go) and
    starts afresh with a new secret, the processes publish their new endpoints and read
    each other's. Collective over `processes`. Processes outside them are known only by
    their devices: a call that needs one fails naming it."""
    global _table, _members, _running
    with _lock:
        if _table is not None:
            _stop_locked(leaving=False)
        base = generation_prefix(name)
        if _members is None or _members.base != base:
            _members = _Members(sorted(processes), base, restart=True)
        # else: this restart tried again, counting its tries on (_Members)
        xla_split_places.new_job()  # the programs judged anew, as in every live process
        client, index = c.distributed_client(), jax.process_index()
        try:
            _table = _start(_members)
        except BaseException:
            # This try's entry only: the next try has its own; the held groups stay, the
            # restart's (published once per restart, read again by its next try).
            _forget_keys(client, _members, index, held=False)
            raise
        _stop_with_jax_distributed()
        before, _running = _running, _members
        if before is not None and before is not _members:  # every live process left it
            _forget_keys(client, before, index)


# The members of the start-up that runs (whose keys a restart deletes once it is done).
_running: _Members | None = None


def _forget_keys(client, members: _Members, index: int, held: bool = True) -> None:
    keys = [f"{members.prefix}/process/{index}"]
    if held:
        keys.append(f"{members.base}/held/{index}")
    for key in keys:
        try:
            client.key_value_delete(key)
        except Exception:  # none there, or the store gone with the job
            pass


def stop(leaving: bool = True) -> None:
    """Stops jax_accl's side of the job: its listeners and channels close, its segments
    go, and the ptrace permission cross-memory attach needed is revoked. Called when
    jax.distributed shuts down, and at exit; then (`leaving`) the other processes are
    told first that this one leaves (jax_accl.departures), so that their calls and
    recoveries waiting for it end at once."""
    with _lock:
        _stop_locked(leaving)


def _stop_locked(leaving: bool) -> None:
    global _table
    client = c.distributed_client()
    if leaving and _table is not None and client is not None:
        departures.announce(
            client, jax.process_index(), "jax.distributed.shutdown() or the program's exit"
        )
    _table = None
    departures.know_table(None)
    # Calls still in flight end first (their errors say jax_accl stopped).
    if not _accl.world_stop(config.current().timeout_s, leaving=leaving):
        log.logger.warning(
            "jax_accl: a call was still running when jax_accl stopped; its "
            "connections stay open until it ends"
        )


def _stop_with_jax_distributed() -> None:
    """Makes jax.distributed's shutdown, by whichever path, stop jax_accl first (its
    store goes with it)."""
    c.hook_distributed_state(before_shutdown=_stop_if_started, after_shutdown=_outlast_service)


_service_elsewhere = False


def _stop_if_started() -> None:
    global _service_elsewhere, _members, _running
    if _table is not None:
        stop()
    _members = _running = None  # a job initialized after this starts with all its processes
    # Only a process that was a client of a service elsewhere waits for it.
    _service_elsewhere = (
        c.distributed_client() is not None and c.distributed_state().service is None
    )
    c.delay_service_shutdown(_SERVICE_GRACE_S)


def _outlast_service() -> None:
    """A process whose coordinator is elsewhere returns from jax.distributed's shutdown
    once the coordinator's service has stopped (it outlives its client by
    _SERVICE_GRACE_S): a second jax.distributed.initialize at the same address right
    after would reach the old service, whose end then cancels the new job's calls."""
    global _service_elsewhere
    if _service_elsewhere:
        _service_elsewhere = False
        time.sleep(_SERVICE_GRACE_S + _SERVICE_STOPS_S)


def _start(members: _Members | None = None) -> list[dict]:
    client = c.distributed_client()
    if client is None:
        raise AcclError(
            "jax_accl: this program spans processes, but jax.distributed is not "
            "initialized; call jax.distributed.initialize() first"
        )
    global _attempt
    _attempt += 1  # collective: every process counts its start-ups alike
    count = jax.process_count()
    if members is None:
        members = _Members(list(range(count)), _PREFIX)
    members.next_try()  # a restart's keys: this try's
    index = jax.process_index()
    _forget_failure(client, index)
    departures.withdraw(client, index)  # an earlier incarnation's, if any
    try:
        return _start_with(client, index, count, members)
    except BaseException as e:
        _publish_failure(client, index, e)
        raise


def _start_with(client, index: int, count: int, members: _Members) -> list[dict]:
    timeout_ms = int(config.current().timeout_s * 1000)
    keys = members.prefix
    if index != members.processes[0]:  # the lowest member draws the secret
        secret = _wait(client, f"{keys}/secret", timeout_ms, index)
        wire = json.loads(_wait(client, f"{keys}/wire", timeout_ms, index))
        return _join(client, index, count, secret, wire, timeout_ms, members)
    secret = secrets.token_hex(16)
    # Process 0's cost model, wire and rail choice, for every process (read after the
    # secret): whatever the other processes' files say, every process plans alike.
    wire = {
        "model": cost_model.read_stored(),
        "wire": cost_model.stored_wire(),
        "choice": config.value("JAX_ACCL_RAIL_CHOICE"),
        "link_gbits": config.value("JAX_ACCL_LINK_GBITS"),
        "stripes": config.value("JAX_ACCL_STRIPES_PER_RAIL"),
    }
    client.key_value_set(f"{keys}/wire", json.dumps(wire), allow_overwrite=True)
    client.key_value_set(f"{keys}/secret", secret, allow_overwrite=True)
    try:
        return _join(client, index, count, secret, wire, timeout_ms, members)
    except BaseException:
        # Out of the store on failure too: the job may go on (a caller that catches
        # this), and nobody who reaches the coordinator later may read it.
        _delete_secret(client, keys)
        raise


# Where a process whose start-up failed says why, for the others' waits (_wait): a
# directory per start-up of the job (_attempt), so that a start-up tried again is not
# ended by the failures of the one before.
_FAILED = f"{_PREFIX}/failed/"
_attempt = 0


def _failed_dir() -> str:
    if _members is not None:  # a restart's keys are its own, each try's
        return f"{_members.prefix}/failed/"
    return f"{_FAILED}{_attempt}/"


# How often a wait in the store looks for such a failure.
_LOOK_S = 0.5


def _publish_failure(client, index: int, error: BaseException) -> None:
    """Why this process's start-up failed, in the store: every other process's wait for
    it ends at once with this reason instead of at the timeout."""
    try:
        client.key_value_set(
            f"{_failed_dir()}{index}", str(error) or type(error).__name__, allow_overwrite=True
        )
    except Exception as e:  # the store gone too: the others' waits end at their timeout
        log.logger.warning("jax_accl: could not tell the other processes why: %s", e)


def _forget_failure(client, index: int) -> None:
    """A failure this process published at an earlier start-up of the job, withdrawn."""
    try:
        client.key_value_delete(f"{_failed_dir()}{index}")
    except Exception:  # none, or the store gone: the start-up says which
        pass


def _timed_out(error: Exception) -> bool:
    return "DEADLINE_EXCEEDED" in str(error) or "timed out" in str(error).lower()


def _wait(client, key: str, timeout_ms: int, index: int) -> str:
    """The value of `key` once it is in the store, looked for in slices of _LOOK_S: in
    between, a start-up failure another process published ends the wait, naming it."""
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        slice_ms = max(1, int(min(_LOOK_S, deadline - time.monotonic()) * 1000))
        try:
            return client.blocking_key_value_get(key, slice_ms)
        except Exception as e:
            if not _timed_out(e):
                raise
            failed = [
                (k, why)
                for k, why in client.key_value_dir_get(_failed_dir())
                if k != f"{_failed_dir()}{index}"
            ]
            if failed:
                process = failed[0][0].rsplit("/", 1)[-1]
                raise AcclError(
                    f"jax_accl: process {index} stopped waiting at start-up: process "
                    f"{process} failed to start: {failed[0][1]}"
                ) from None
            if time.monotonic() >= deadline:
                raise


def _delete_secret(client, keys: str) -> None:
    """The secret out of the store, and the wire published with it (a later start in this
    job publishes them again)."""
    try:
        client.key_value_delete(f"{keys}/secret")
        client.key_value_delete(f"{keys}/wire")
    except Exception as e:  # the store may be gone with the job: then so is the secret
        log.logger.warning("jax_accl: could not delete the job's secret from the store: %s", e)


def _set_tcp_congestion() -> None:
    """JAX_ACCL_TCP_CONGESTION for the connections about to be made: a value the kernel
    refuses is an error if the user chose it; the default refused keeps the system's."""
    name = config.value("JAX_ACCL_TCP_CONGESTION")
    try:
        _accl.set_tcp_congestion(name)
    except ValueError as e:
        if (config.environment("JAX_ACCL_TCP_CONGESTION") or "").strip():
            raise AcclError(f"JAX_ACCL_TCP_CONGESTION={name}: {e}") from None
        log.logger.warning("jax_accl: %s; the connections keep the system's", e)
        _accl.set_tcp_congestion("")


def _join(
    client, index: int, count: int, secret: str, wire: dict, timeout_ms: int, members: _Members
) -> list[dict]:
    """Listeners up, this process's entry published, everybody's read (steps 2 and 3);
    `wire`: process 0's stored cost model ("model", or None), wire calibration ("wire",
    or None), stated link rate ("link_gbits", or None) and rail choice ("choice"), which
    every process plans and stripes by."""
    host = host_id()
    _accl.set_pipeline_chunks(config.value("JAX_ACCL_PIPELINE_CHUNKS"))
    _accl.set_xla_wire_dtype(config.value("JAX_ACCL_WIRE_DTYPE"))  # XLA's own sums
    _accl.set_link_spin_us(config.value("JAX_ACCL_SPIN_US"))
    _set_tcp_congestion()
    rails, why = rails_lib.paying(rails_lib.resolve(), wire["wire"], wire["choice"])
    if why:
        log.logger.info("%s", why)
    cost_model.apply_job(wire["model"], wire["wire"], len(rails), wire["link_gbits"])
    global _stripes
    _stripes = stripes.agree(
        client,
        # The live processes' keys (a rejoin's too), one set per start-up: the start-up's
        # secret, hashed, tells a start-up tried again from the last.
        f"{members.prefix}/stripes/{hashlib.sha256(secret.encode()).hexdigest()[:16]}",
        index,
        list(members.processes),
        host,
        rails[0][1],
        wire["stripes"],
        lambda key: _wait(client, key, timeout_ms, index),
    )
    ports = _accl.world_start(
        index,
        count,
        secret.encode(),
        host,
        rails,
        _stripes["stripes"],
        config.value("JAX_ACCL_CMA"),
        config.value("JAX_ACCL_PORTS"),
    )
    atexit.register(stop)
    signing.set_secret(secret)
    _accl.set_epoch_agreement(recovery.agree_on_epoch)
    entry = {
        "host": host,
        "rails": [[name, ip, port, weight] for (name, ip, weight), port in zip(rails, ports)],
        "devices": [d.id for d in jax.local_devices()],
    }
    keys = members.prefix
    client.key_value_set(f"{keys}/process/{index}", json.dumps(entry), allow_overwrite=True)
    table = []
    for i in range(count):
        if i not in members.processes:
            table.append(_absent(i))
            continue
        try:
            table.append(json.loads(_wait(client, f"{keys}/process/{i}", timeout_ms, index)))
        except AcclError:
            raise
        except Exception as e:  # the coordination service names what went wrong
            raise AcclError(
                f"jax_accl: process {index} waited in vain for process {i} to "
                f"publish its endpoints: {e}"
            ) from e
    client.key_value_set(f"{STARTED_PREFIX}{index}", keys, allow_overwrite=True)
    if index == members.processes[0]:
        # Every process read the secret before it published its entry: it has served.
        # Out of the store, nobody who reaches the coordinator later can read it.
        _delete_secret(client, keys)
    _accl.world_set_processes(
        [(e["host"], [tuple(r) for r in e["rails"]], e["devices"]) for e in table]
    )
    departures.know_table(table)
    hosts = sorted({e["host"] for e in table})
    log.logger.info(
        "process %d of %d on host %r; %d host(s): %s",
        index,
        count,
        host,
        len(hosts),
        ", ".join(
            f"{h}: processes {[i for i, e in enumerate(table) if e['host'] == h]}" for h in hosts
        ),
    )
    log.logger.info(
        "rails of this process: %s",
        ", ".join(f"{name} {ip}:{port} (weight {w:g})" for name, ip, port, w in entry["rails"]),
    )
    return table


def stripes_per_rail() -> dict:
    """The job's connections per rail and peer, process 0's ({"stripes", "why"}, and where
    process 0 probed the wire the rates it measured: jax_accl.stripes); {} before the
    job started."""
    return dict(_stripes)


def _absent(process: int) -> dict:
    """The entry of a process that is not live at a restart: its devices, on a host of
    its own, without rails (a call that needs it fails naming it)."""
    devices = [d.id for d in jax.devices() if d.process_index == process]
    return {"host": f"(process {process}, not live)", "rails": [], "devices": devices}


def topology() -> list[dict]:
    """The process table: [{"host", "rails": [[name, ip, port, weight]], "devices"}]."""
    return ensure_started() if jax.process_count() > 1 else []
