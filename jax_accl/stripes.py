"""How many TCP connections each rail carries between two processes: the job's stripes.

Clouds cap what one TCP flow gets well below the NIC (5-10 Gbit/s of a 25-100 Gbit/s
link): there a message striped over several connections of a rail
(xla_ffi/transport/channel_link.h cuts it into one frame per connection) is carried
by as many flows at once. Where one flow fills the link, more connections gain nothing.

With JAX_ACCL_STRIPES_PER_RAIL=auto (the default) process 0 finds out at job start, for
the whole job: between its first rail and the first process on another host, it times
TCP streams of one connection and of PROBE_FLOWS connections at once, twice each,
interleaved (one, many, one, many: the best of each), one thread driving all of them at
each end as in jax_accl's calls (where the CPU is the wire's limit, more flows then gain
nothing), and stripes over as many connections as the gain says pay (stripes_for). A
number instead is the count for the job, process 0's. Every process reads process 0's
answer from jax.distributed's key-value store (agree), so both ends of every pair open
the same connections.
"""

from __future__ import annotations

import json
import math
import selectors
import socket
import struct
import threading
import time

PROBE_FLOWS = 8  # the most connections per rail the probe tries (and a job opens)
PROBE_SECONDS = 0.1  # each stream's sending time
PROBE_TIMEOUT_S = 10.0  # the longest any step of the probe may take (then: one stripe)
STRIPES_PAY_MIN = 1.5  # several flows must carry this much more than one to stripe
_CHUNK = 256 << 10
_COUNT = struct.Struct("!Q")


def stripes_for(one_flow: float, many_flows: float, flows: int = PROBE_FLOWS) -> int:
    """Connections per rail, from the rates (bytes/s) of one flow and of `flows` at once:
    one where they carry under STRIPES_PAY_MIN x one flow's; else the flows that carry
    the many flows' rate at one flow's each (the gain rounded up, a tenth forgiven),
    at most `flows`."""
    if one_flow <= 0 or many_flows < STRIPES_PAY_MIN * one_flow:
        return 1
    return max(2, min(flows, math.ceil(many_flows / one_flow - 0.1)))


def _tune(sock: socket.socket, congestion: str) -> None:
    """As jax_accl's own connections: no Nagle, its congestion control where the kernel
    has it (a refused name: the system's, as the connections then keep)."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if congestion and congestion != "system":
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, congestion.encode())
        except OSError:
            pass


def _bind_in(sock: socket.socket, ip: str, ports) -> None:
    first, last = ports
    if not first:
        sock.bind((ip, 0))
        return
    for port in range(first, last + 1):
        try:
            sock.bind((ip, port))
            return
        except OSError:
            continue
    raise OSError(f"no free port in JAX_ACCL_PORTS={first}-{last} on {ip}")


class Receiver:
    """The probe's far end: a listener on `ip` (on the first free port of `ports`, as
    JAX_ACCL_PORTS gives them, or any) whose every connection is read to its end, then
    told how many bytes arrived (8 bytes, network order). One thread reads every
    connection, as one thread drives all of a call's connections in jax_accl (a wire whose
    limit is the CPU then shows no gain from more flows). The sender ends each stream
    first, so the listener's port is free again for jax_accl's own listener at once."""

    def __init__(self, ip: str, timeout_s: float, congestion: str, ports=(0, 0)):
        self._timeout_s = timeout_s
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        _tune(self._listener, congestion)
        _bind_in(self._listener, ip, ports)
        self._listener.listen(2 * PROBE_FLOWS)
        self._listener.setblocking(False)
        self.address = f"{ip}:{self._listener.getsockname()[1]}"
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        buffer = memoryview(bytearray(_CHUNK))
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            received: dict[socket.socket, int] = {}
            while not self._closing.is_set():
                for key, _ in selector.select(timeout=0.05):
                    if key.fileobj is self._listener:
                        try:
                            conn, _ = self._listener.accept()
                        except OSError:
                            continue
                        conn.setblocking(False)
                        received[conn] = 0
                        selector.register(conn, selectors.EVENT_READ)
                        continue
                    conn = key.fileobj
                    try:
                        n = conn.recv_into(buffer)
                    except BlockingIOError:
                        continue
                    except OSError:  # the sender gave up: it says why
                        n = -1
                    if n > 0:
                        received[conn] += n
                        continue
                    selector.unregister(conn)
                    if n == 0:  # the stream's end: its count back
                        conn.settimeout(self._timeout_s)
                        try:
                            conn.sendall(_COUNT.pack(received[conn]))
                        except OSError:
                            pass
                    conn.close()
                    del received[conn]
            for conn in received:
                conn.close()

    def close(self) -> None:
        self._closing.set()
        self._thread.join(self._timeout_s)
        self._listener.close()


def stream_rate(
    local_ip: str, address: str, flows: int, seconds: float, timeout_s: float, congestion: str
) -> float:
    """Bytes/s that `flows` connections from local_ip to `address` (a Receiver's) carried
    together, each sending for `seconds` (one thread driving them all, non-blocking):
    what the receiver counted, over the time from the first byte sent to the last count
    back."""
    host, port = address.rsplit(":", 1)
    socks = []
    chunk = memoryview(bytearray(_CHUNK))
    try:
        for _ in range(flows):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(sock)
            _tune(sock, congestion)
            sock.settimeout(timeout_s)
            sock.bind((local_ip, 0))
            sock.connect((host, int(port)))
            sock.setblocking(False)
        start = time.monotonic()
        with selectors.DefaultSelector() as selector:
            for sock in socks:
                selector.register(sock, selectors.EVENT_WRITE)
            while (left := start + seconds - time.monotonic()) > 0:
                for key, _ in selector.select(timeout=left):
                    try:
                        key.fileobj.send(chunk)
                    except BlockingIOError:
                        pass
        total = 0
        for sock in socks:
            sock.shutdown(socket.SHUT_WR)
        counted_by = time.monotonic() + timeout_s  # one deadline for every count
        for sock in socks:
            sock.settimeout(max(0.001, counted_by - time.monotonic()))
            total += _read_count(sock, address)
        elapsed = time.monotonic() - start
    finally:
        for sock in socks:
            sock.close()
    return total / elapsed


def _read_count(sock: socket.socket, address: str) -> int:
    reply = b""
    while len(reply) < _COUNT.size:
        part = sock.recv(_COUNT.size - len(reply))
        if not part:
            raise ConnectionError(f"the probe's receiver at {address} closed without its count")
        reply += part
    return _COUNT.unpack(reply)[0]


def probe(local_ip: str, address: str, timeout_s: float, congestion: str, budget_s: float) -> dict:
    """One flow against PROBE_FLOWS, interleaved, twice each; the best rate of each and
    the stripes they pay for. The whole probe takes at most `budget_s` (TimeoutError:
    the job then keeps one stripe), so the processes waiting for its answer never
    reach their own deadline first."""
    best = {1: 0.0, PROBE_FLOWS: 0.0}
    end = time.monotonic() + budget_s
    for flows in (1, PROBE_FLOWS, 1, PROBE_FLOWS):
        left = end - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"the probe took longer than {budget_s:.3g} s")
        step_timeout = min(timeout_s, left)
        rate = stream_rate(local_ip, address, flows, PROBE_SECONDS, step_timeout, congestion)
        best[flows] = max(best[flows], rate)
    return {
        "stripes": stripes_for(best[1], best[PROBE_FLOWS]),
        "one_flow_bytes_per_s": best[1],
        "many_flows_bytes_per_s": best[PROBE_FLOWS],
        "flows": PROBE_FLOWS,
    }


def agree(client, prefix: str, index: int, processes, host: str, ip: str, setting, wait) -> dict:
    """Process 0's stripes for the job, read by every process: {"stripes", and where
    probed "one_flow_bytes_per_s", "many_flows_bytes_per_s", "flows"; "why"}.

    `processes`: the live processes, ascending (every process at the job's start; the
    live ones at a restart, jax_accl.membership), the first of which probes;
    `setting`: process 0's JAX_ACCL_STRIPES_PER_RAIL (a count, or "auto"); `host` and `ip`:
    this process's host id and first rail's address; `wait(key)`: the store's value of
    `key`, waited for (the caller's timeout and failure reports); keys under `prefix`."""
    from jax_accl import config, log  # here: this module stays importable without jax

    if setting != "auto":
        return {"stripes": int(setting), "why": "JAX_ACCL_STRIPES_PER_RAIL"}
    if len(processes) == 1:
        return {"stripes": 1, "why": "one process"}
    timeout_s = min(PROBE_TIMEOUT_S, config.current().timeout_s)
    congestion = config.value("JAX_ACCL_TCP_CONGESTION")
    if index != processes[0]:
        client.key_value_set(f"{prefix}/host/{index}", host)
        partner = int(wait(f"{prefix}/partner"))
        receiver = None
        if partner == index:
            try:
                receiver = Receiver(ip, timeout_s, congestion, config.value("JAX_ACCL_PORTS"))
            except OSError as e:  # process 0 then keeps one stripe, saying why
                client.key_value_set(f"{prefix}/address", f"none: {e}")
            else:
                client.key_value_set(f"{prefix}/address", receiver.address)
        try:
            return json.loads(wait(f"{prefix}/choice"))
        finally:
            if receiver:
                receiver.close()
    partner = next((i for i in processes[1:] if wait(f"{prefix}/host/{i}") != host), -1)
    client.key_value_set(f"{prefix}/partner", str(partner))
    if partner < 0:
        choice = {"stripes": 1, "why": "one host"}
    else:
        address = wait(f"{prefix}/address")
        try:
            if address.startswith("none: "):
                raise OSError(f"process {partner} could not listen: {address[6:]}")
            # Half the job's deadline at most: the others wait for the answer that long.
            budget_s = config.current().timeout_s / 2
            choice = {**probe(ip, address, timeout_s, congestion, budget_s), "why": "probe"}
        except OSError as e:
            log.logger.warning(
                "jax_accl: the stripes probe to %s failed (%s): one per rail", address, e
            )
            choice = {"stripes": 1, "why": f"the probe failed: {e}"}
        log.logger.info(
            "jax_accl: %d connection(s) per rail (%s)",
            choice["stripes"],
            ", ".join(f"{k} {v:.4g}" for k, v in choice.items() if k.endswith("per_s"))
            or choice["why"],
        )
    client.key_value_set(f"{prefix}/choice", json.dumps(choice))
    return choice
