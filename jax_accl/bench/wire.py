"""The wire's own limit between two namespaced hosts: a bidirectional TCP stream test,
per rail and on all rails at once, before a multi-host job runs on them.

On each rail in the test, host 1 listens on its rail address and host 0 connects from
its own; then each end sends and receives at the same time (a thread each way per
rail, `sendall` of a 4 MiB buffer and `recv_into` one, both releasing the GIL, so the
kernel's TCP path is the limit, not Python) for `seconds`, and shuts its sending side.
The rate each way is what each end received over the time it took, the two directions
averaged (they share the cores the namespaces run on).

Not iperf3 --bidir, even where it is installed: Debian 12's (3.12) drives both directions
from one thread, and between the same two namespaced hosts it measured 0.64-0.71 GB/s
each way where this probe measured 0.73-1.48 GB/s (alternating, 2 s each, a loaded 2-core
machine); a limit taken from it would be loose. Each end is this file run as a script in
its host's namespace (so it starts without importing jax), its connections with the
congestion control jax_accl's have (JAX_ACCL_TCP_CONGESTION):

    python wire.py --listen 10.90.0.2,10.91.0.2 --seconds 2 --congestion reno   # host 1
    python wire.py --connect 10.90.0.2,10.91.0.2 --seconds 2 --congestion reno  # host 0
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import threading
import time

BUFFER = 4 << 20
PORT = 29170


def _tuned(sock: socket.socket, congestion: str) -> socket.socket:
    """Buffers, no Nagle, and `congestion` ("": the system's) before it connects."""
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        sock.setsockopt(socket.SOL_SOCKET, option, BUFFER)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if congestion:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, congestion.encode())
        except OSError:  # refused (as jax_accl's connections then keep it): the system's
            pass
    return sock


def _send_for(sock: socket.socket, seconds: float, sent: list) -> None:
    chunk = memoryview(bytearray(BUFFER))
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sock.sendall(chunk)
        sent[0] += BUFFER
    sock.shutdown(socket.SHUT_WR)


def _receive_all(sock: socket.socket, received: list) -> None:
    """Reads until the peer shuts its side; received = [bytes, seconds from the first]."""
    chunk = memoryview(bytearray(BUFFER))
    start = None
    while True:
        n = sock.recv_into(chunk)
        if not n:
            break
        start = start or time.monotonic()
        received[0] += n
    received[1] = time.monotonic() - start if start else 0.0


def stream_both_ways(socks: list, seconds: float) -> list[dict]:
    """Sends and receives on every socket at once; per socket, bytes and seconds each way."""
    sent = [[0] for _ in socks]
    received = [[0, 0.0] for _ in socks]
    threads = []
    for sock, s, r in zip(socks, sent, received):
        threads.append(threading.Thread(target=_send_for, args=(sock, seconds, s)))
        threads.append(threading.Thread(target=_receive_all, args=(sock, r)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [{"sent": s[0], "received": r[0], "seconds": r[1]} for s, r in zip(sent, received)]


def listen_main(addresses: list[str], seconds: float, congestion: str = "") -> dict:
    listeners = []
    for address in addresses:
        listener = _tuned(socket.socket(), congestion)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((address, PORT))
        listener.listen(1)
        listeners.append(listener)
    print("READY", flush=True)
    socks = [_tuned(listener.accept()[0], congestion) for listener in listeners]
    return {"streams": stream_both_ways(socks, seconds)}


def connect_main(addresses: list[str], seconds: float, congestion: str = "") -> dict:
    socks = []
    for address in addresses:
        sock = _tuned(socket.socket(), congestion)  # as jax_accl's: before connecting
        sock.settimeout(30)
        sock.connect((address, PORT))
        sock.settimeout(None)
        socks.append(sock)
    return {"streams": stream_both_ways(socks, seconds)}


def rate_each_way(server: dict, client: dict) -> float:
    """Bytes/s each way at once, summed over the rails: the two directions averaged."""
    ways = [
        sum(s["received"] for s in side["streams"]) / max(s["seconds"] for s in side["streams"])
        for side in (server, client)
    ]
    return sum(ways) / 2


def measure(names: list[str], rails: list[int], seconds: float = 2.0) -> float:
    """Bytes/s each way between namespaced hosts names[0] and names[1] on `rails` at once."""
    from jax_accl import config
    from jax_accl.testing import netns

    addresses = ",".join(netns.rail_ip(1, r) for r in rails)
    congestion = config.value("JAX_ACCL_TCP_CONGESTION")
    probe = [sys.executable, __file__, "--seconds", str(seconds), "--congestion", congestion]
    server = subprocess.Popen(
        ["ip", "netns", "exec", names[1], *probe, "--listen", addresses],
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    try:
        if server.stdout.readline().strip() != "READY":
            raise RuntimeError("wire probe: the listener did not start")
        client = subprocess.run(
            ["ip", "netns", "exec", names[0], *probe, "--connect", addresses],
            capture_output=True,
            text=True,
            cwd="/",
            timeout=seconds + 60,
        )
        if client.returncode != 0:
            raise RuntimeError(f"wire probe failed: {client.stderr[-2000:]}")
        served, _ = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    return rate_each_way(_result(served), _result(client.stdout))


def _result(output: str) -> dict:
    return json.loads(next(line for line in output.splitlines() if line.startswith("{")))


def measure_rails(names: list[str], rails: int, seconds: float = 2.0) -> dict:
    """{description: bytes/s each way}: each rail alone, then every rail at once."""
    rates = {f"rail{r}": measure(names, [r], seconds) for r in range(rails)}
    if rails > 1:
        rates["all rails"] = measure(names, list(range(rails)), seconds)
    return rates


def describe(rates: dict) -> str:
    return ", ".join(f"{name} {rate / 1e9:.2f} GB/s" for name, rate in rates.items())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="wire.py")
    side = parser.add_mutually_exclusive_group(required=True)
    side.add_argument("--listen", help="comma-separated addresses of this host to listen on")
    side.add_argument("--connect", help="comma-separated addresses to connect to")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--congestion", default="", help="TCP congestion control ('': system's)")
    args = parser.parse_args(argv)
    if args.listen:
        result = listen_main(args.listen.split(","), args.seconds, args.congestion)
    else:
        result = connect_main(args.connect.split(","), args.seconds, args.congestion)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
