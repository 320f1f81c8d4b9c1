"""Native tier: the message path of every algorithm over byte-stream channels (the
framing and progress engine of the cross-process transports, on memory rings), and
the TCP listener's handshake against strangers."""

import dataclasses
import hashlib
import hmac
import os
import socket
import struct
import time

import numpy as np
import pytest

from jax_accl import _accl, _accl_testing, config


def run_channels(
    inputs, algorithm, stripes=1, counts=None, op="sum", timeout_s=30.0, in_place=False
):
    outputs = inputs if in_place else [np.empty_like(x) for x in inputs]
    counts = counts or [x.size for x in inputs]
    errors = _accl_testing.allreduce_threads_channels(
        [x.ctypes.data for x in inputs],
        [o.ctypes.data for o in outputs],
        counts,
        inputs[0].dtype.name,
        op,
        algorithm,
        stripes,
        timeout_s,
    )
    return outputs, errors


@pytest.mark.parametrize("algorithm", ["direct", "ring", "halving_doubling"])
@pytest.mark.parametrize("n", [2, 3, 5, 8])
@pytest.mark.parametrize("count", [0, 1, 7, 1000, 2**19 + 3])
@pytest.mark.parametrize("stripes", [1, 3])
def test_message_path_matches_numpy_bitwise(algorithm, n, count, stripes):
    rng = np.random.default_rng(n * 1000 + count)
    inputs = [rng.integers(-(2**31), 2**31 - 1, count, dtype=np.int32) for _ in range(n)]
    outputs, errors = run_channels(inputs, algorithm, stripes)
    assert errors == [""] * n
    with np.errstate(over="ignore"):
        want = np.sum(inputs, axis=0, dtype=np.int32) if count else np.empty(0, np.int32)
    for out in outputs:
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("algorithm", ["ring", "halving_doubling"])
@pytest.mark.parametrize("count", [(1 << 19), (3 << 20) + 5, (16 << 20) + 1])
@pytest.mark.parametrize("stripes", [1, 2])
@pytest.mark.parametrize("in_place", [False, True])
def test_two_ranks_stream_their_halves_exact(algorithm, count, stripes, in_place):
    """Two ranks from 2 MiB on (algorithms/pair_exchange.cc): halves exchanged chunk by
    chunk, a chunk's results beside the next chunk's halves (2 to 16 chunks, uneven
    halves), in place too (a chunk's results land where its halves were sent from)."""
    rng = np.random.default_rng(count + stripes)
    inputs = [rng.integers(-(2**31), 2**31 - 1, count, dtype=np.int32) for _ in range(2)]
    with np.errstate(over="ignore"):
        want = np.sum(inputs, axis=0, dtype=np.int32)
    outputs, errors = run_channels(inputs, algorithm, stripes, in_place=in_place)
    assert errors == ["", ""]
    for out in outputs:
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("algorithm", ["direct", "ring", "halving_doubling"])
@pytest.mark.parametrize("n", [3, 4])
def test_in_place_message_path(algorithm, n):
    """out == in (XLA's aliased operand): sends still in flight must read the input."""
    rng = np.random.default_rng(n)
    inputs = [rng.integers(-(2**31), 2**31 - 1, 300_001, dtype=np.int32) for _ in range(n)]
    with np.errstate(over="ignore"):
        want = np.sum(inputs, axis=0, dtype=np.int32)
    outputs, errors = run_channels(inputs, algorithm, in_place=True)
    assert errors == [""] * n
    for out in outputs:
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("algorithm", ["direct", "ring", "halving_doubling"])
def test_mismatched_lengths_are_an_error_on_every_rank(algorithm):
    inputs = [np.ones(4096, np.float32) for _ in range(4)]
    counts = [4096, 4096, 2048, 4096]  # rank 2 calls with a different shape
    _, errors = run_channels(inputs, algorithm, counts=counts, timeout_s=5.0)
    assert all(errors), errors
    assert any("different call" in e for e in errors), errors


HELLO = struct.Struct("<IIqqIIdQ16s")  # transport/handshake.h: magic .. weight, space, nonce
CHALLENGE_BYTES = 48  # the acceptor's nonce and its proof
MAGIC, VERSION = 0x4C434341, 5


def hello(dst=7, *, src=1, rail=0, stripe=0, weight=1.0, version=VERSION, space=0):
    return HELLO.pack(MAGIC, version, src, dst, rail, stripe, weight, space, os.urandom(16))


def endpoint(address) -> bytes:
    """handshake.h's encoding of one end: an IPv4 address mapped into IPv6, the port."""
    ip, port = address[:2]
    return socket.inet_pton(socket.AF_INET6, "::ffff:" + ip) + struct.pack(">H", port)


def endpoints(connector_end, acceptor_end) -> bytes:
    return endpoint(connector_end) + endpoint(acceptor_end)


def proof(secret: bytes, role: str, hello_bytes: bytes, nonce: bytes, ends: bytes) -> bytes:
    """What handshake.h says each side proves, computed by Python's own hmac."""
    message = b"jax_accl " + role.encode() + hello_bytes + nonce + ends
    return hmac.new(secret, message, hashlib.sha256).digest()


@pytest.fixture
def listener():
    secret = os.urandom(16).hex().encode()
    ports = _accl.world_start(0, 1, secret, "test-host", [("lo", "127.0.0.1", 1.0)], 1, False)
    _accl.world_set_processes([("test-host", [("lo", "127.0.0.1", ports[0], 1.0)], [7])])
    yield secret, ports[0]
    _accl.world_stop()


def talk(port, payload: bytes) -> bytes:
    """Sends payload, closes our side, returns whatever the listener answers."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        return s.recv(64)


def exchange(port, secret, hello_bytes, respond=None, ends=None):
    """Plays the connector: hello, the listener's challenge, our response (the right
    proof, for this connection's endpoints or `ends`, unless `respond(challenge)` gives
    another); returns (challenge, verdict, the response sent, the endpoints); a
    connection the listener closed or reset gives the verdict b""."""
    challenge = b""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            ends = ends or endpoints(s.getsockname(), s.getpeername())
            s.sendall(hello_bytes)
            while len(challenge) < CHALLENGE_BYTES:
                chunk = s.recv(CHALLENGE_BYTES - len(challenge))
                if not chunk:
                    return challenge, b"", b"", ends
                challenge += chunk
            nonce = challenge[:16]
            response = (
                respond(challenge)
                if respond
                else proof(secret, "connector", hello_bytes, nonce, ends)
            )
            s.sendall(response)
            return challenge, s.recv(1), response, ends
    except (ConnectionResetError, BrokenPipeError):
        return challenge, b"", b"", ends


def wait_for_refused(before, count):
    deadline = time.time() + 10
    while _accl.stats()["refused_connections"] - before < count and time.time() < deadline:
        time.sleep(0.05)
    return _accl.stats()["refused_connections"] - before


def test_the_job_is_admitted_both_ways_without_the_secret_on_the_wire(listener):
    secret, port = listener
    h = hello()
    challenge, verdict, response, ends = exchange(port, secret, h)
    assert verdict == b"K"
    # The listener proved that it knows the secret, for this hello, its own nonce and
    # this connection's endpoints.
    assert challenge[16:] == proof(secret, "acceptor", h, challenge[:16], ends)
    assert secret not in h + challenge + response


def test_proofs_bind_the_endpoints_so_a_relay_gets_nowhere(listener):
    """A relay in the middle holds two connections: the connector's to it, its own to the
    listener. Proofs computed for the connector's connection fail on the relay's, both
    ways: the listener refuses the response, and its challenge is no proof to the
    connector."""
    secret, port = listener
    relay = socket.socket()
    relay.bind(("127.0.0.3", 0))
    victim_ends = endpoints(("127.0.0.2", 40000), relay.getsockname())  # what the victim sees
    relay.close()
    before = _accl.stats()["refused_connections"]
    h = hello(stripe=3)
    challenge, verdict, _, _ = exchange(port, secret, h, ends=victim_ends)
    assert verdict == b"" and len(challenge) == CHALLENGE_BYTES
    assert challenge[16:] != proof(secret, "acceptor", h, challenge[:16], victim_ends)
    assert wait_for_refused(before, 1) == 1
    # The same hello, proved for the connection it travels on, gets in.
    assert exchange(port, secret, h)[1] == b"K"


def test_strangers_are_refused_and_the_listener_keeps_serving(listener):
    secret, port = listener
    strangers = [
        b"",  # says nothing
        b"GET / HTTP/1.0\r\n\r\n",  # wrong protocol
        os.urandom(HELLO.size),  # random bytes
        hello(version=1),  # the old protocol, which sent the secret itself
        hello(version=2),  # the protocol before channel spaces
        hello(version=3),  # the protocol before proofs bound the endpoints
        hello(version=4),  # the protocol before frames carried the call's plan
        hello(weight=float("nan")),  # a senseless rail weight
        hello()[:60],  # truncated
    ]
    before = _accl.stats()["refused_connections"]
    for payload in strangers:
        assert talk(port, payload) == b"", payload[:20]
    # A well-formed hello gets a challenge, but without the secret no response passes.
    verdict = exchange(port, secret, hello(), respond=lambda c: os.urandom(32))[1]
    assert verdict == b""
    # With the secret but for a device that does not live here: refused before the
    # listener proves anything (no challenge comes back).
    challenge, verdict, _, _ = exchange(port, secret, hello(dst=99))
    assert challenge == b"" and verdict == b""
    assert wait_for_refused(before, len(strangers) + 2) == len(strangers) + 2
    assert exchange(port, secret, hello())[1] == b"K"


def test_a_recorded_exchange_cannot_be_replayed(listener):
    secret, port = listener
    h = hello(stripe=1)
    _, verdict, response, _ = exchange(port, secret, h)
    assert verdict == b"K"
    before = _accl.stats()["refused_connections"]
    # The same hello and the recorded response: the listener's nonce is new, so the
    # old response proves nothing.
    verdict = exchange(port, secret, h, respond=lambda challenge: response)[1]
    assert verdict == b""
    assert wait_for_refused(before, 1) == 1


def test_a_second_connection_for_the_same_unclaimed_key_is_refused(listener):
    secret, port = listener
    h = hello(src=3, rail=0, stripe=2)
    assert exchange(port, secret, h)[1] == b"K"
    before = _accl.stats()["refused_connections"]
    assert exchange(port, secret, h)[1] == b""  # the first one stays
    assert wait_for_refused(before, 1) == 1


def test_a_flood_of_silent_connections_is_bounded_and_the_job_still_gets_in(listener):
    secret, port = listener
    before = _accl.stats()["refused_connections"]
    silent = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(80)]
    try:
        # At most 64 handshakes are read at once: the rest are closed unread, at once.
        assert wait_for_refused(before, 16) >= 16
        deadline = time.time() + 15  # the silent ones time out (5 s) and free their places
        while time.time() < deadline:
            if exchange(port, secret, hello(src=5))[1] == b"K":
                break
            time.sleep(0.5)
        else:
            pytest.fail("the listener never admitted the job again")
    finally:
        for s in silent:
            s.close()


def test_a_new_connection_takes_the_oldest_place_so_holders_never_lock_the_job_out(listener):
    """A program on the job's host, connecting from the job's own address (127.0.0.1
    here), holds every one of the 64 places: one connection waits for our response after
    the listener's challenge, 63 say nothing. The job's next connection is admitted at
    once, its first try; the oldest holder is closed saying busy (in place of the
    admission byte, where the challenge was sent), then the next oldest for the next."""
    secret, port = listener
    before = _accl.stats()["refused_connections"]
    challenged = socket.create_connection(("127.0.0.1", port), timeout=10)
    challenged.sendall(hello(src=40))
    assert len(challenged.recv(CHALLENGE_BYTES, socket.MSG_WAITALL)) == CHALLENGE_BYTES
    silent = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(63)]
    try:
        time.sleep(0.5)  # every one accepted: all places taken, none refused
        assert _accl.stats()["refused_connections"] == before
        start = time.monotonic()
        assert exchange(port, secret, hello(src=41))[1] == b"K"
        assert challenged.recv(1) == b"B"  # evicted after its challenge: try again
        silent.append(socket.create_connection(("127.0.0.1", port), timeout=10))  # full again
        assert exchange(port, secret, hello(src=42))[1] == b"K"
        assert silent[0].recv(1) == b"B"  # evicted before its hello: busy
        # Waiting for a place would take a holder's 5 s to run out (the two exchanges take
        # ms; on a saturated 2-core machine they took 2 s).
        assert time.monotonic() - start < 4.5, "the job waited for a place"
        assert wait_for_refused(before, 2) == 2
    finally:
        challenged.close()
        for s in silent:
            s.close()


def test_strangers_get_a_few_short_places_and_never_the_jobs(listener):
    """Silent connections from 5 addresses that are not the job's (127.0.0.2-6; the job's
    peer is 127.0.0.1), 10 each: at most 4 handshakes at once per stranger and 16 for all
    of them, the older ones closed unread at once (saying busy) as newer ones come, and
    the 16 left closed after 1 s;
    meanwhile the job is admitted at once, every time."""
    secret, port = listener
    before = _accl.stats()["refused_connections"]

    def from_stranger(address):
        s = socket.socket()
        s.bind((address, 0))
        s.settimeout(10)
        s.connect(("127.0.0.1", port))
        return s

    silent = [from_stranger(f"127.0.0.{2 + k % 5}") for k in range(50)]
    try:
        assert wait_for_refused(before, 34) >= 34  # all but 16, at once
        assert silent[0].recv(1) in (b"B", b"")  # the oldest evicted: busy, or already closed
        for k in range(5):  # the job's own places are free
            assert exchange(port, secret, hello(src=20 + k))[1] == b"K"
        assert wait_for_refused(before, 50) == 50  # the 16 timed out after 1 s
    finally:
        for s in silent:
            s.close()


@pytest.mark.parametrize("weight", [float("nan"), float("inf"), 0.0, -1.0, 1e7])
def test_a_hello_with_a_senseless_rail_weight_is_refused(weight):
    assert _accl_testing.parse_hello(hello()) == ""
    assert "rail weight" in _accl_testing.parse_hello(hello(weight=weight))


@pytest.mark.parametrize("weight", [float("nan"), float("inf"), 0.0, -2.0])
def test_a_senseless_local_rail_weight_is_refused_at_start(weight):
    with pytest.raises(RuntimeError, match="weight .* is not a positive finite number"):
        _accl.world_start(
            0, 1, os.urandom(16).hex().encode(), "h", [("lo", "127.0.0.1", weight)], 1, False
        )
    assert not _accl.world_started()


@pytest.mark.parametrize("spec", ["lo:nan", "lo:inf", "lo:-1", "lo:0", "lo:abc", "lo:1e9"])
def test_rail_weights_in_the_environment_must_be_positive_and_finite(spec):
    from jax_accl import rails

    with pytest.raises(ValueError, match=f"JAX_ACCL_RAILS='{spec}': weight of 'lo'"):
        rails.resolve(spec)


def test_tcp_channels_detect_a_vanished_peer_without_waiting_for_the_deadline():
    """A host that disappears sends no reset: keepalive (probes after 5 s idle, 3 of them
    2 s apart) ends an idle connection; data in flight is watched through TCP_INFO. No
    TCP_USER_TIMEOUT (0, the kernel's default): it would also end the connection to a
    peer that is alive but late (a zero window), long before the call's deadline."""
    options = _accl_testing.tcp_channel_options()
    for end in ("", "connected ", "accepted "):
        del options[end + "TCP_CONGESTION"]
    assert options == {
        "SO_KEEPALIVE": "1",
        "TCP_KEEPIDLE": "5",
        "TCP_KEEPINTVL": "2",
        "TCP_KEEPCNT": "3",
        "TCP_USER_TIMEOUT": "0",
        "TCP_NODELAY": "1",
    }


@pytest.mark.parametrize("sent", [0, 70_000])
def test_a_peer_that_left_in_order_has_not_failed_the_call_but_one_that_poisoned_has(sent):
    """Issue 59: a process whose part of a call is done may exit while slower ranks still
    finish theirs. Its orderly close is no failure to a rank that waits for another peer
    (the liveness look, poisoned_status); what it sent is still read, and only a rank
    that reads past it learns that it left. A failed call resets its connections
    (poison), which every peer reads as a failure."""
    left = _accl_testing.tcp_peer_end("close", sent)
    assert left["poisoned"] == ""
    assert left["read"] == str(sent)
    assert "connection closed by the peer" in left["read_error"]
    failed = _accl_testing.tcp_peer_end("poison", sent)
    assert "reset or timed out (a peer failed the call" in failed["poisoned"], failed
    assert failed["read_error"] != ""


def _system_congestion_control() -> str:
    with open("/proc/sys/net/ipv4/tcp_congestion_control") as f:
        return f.read().strip()


@pytest.mark.parametrize("chosen", ["reno", ""])
def test_tcp_channels_take_the_congestion_control_set_for_them(chosen):
    """JAX_ACCL_TCP_CONGESTION reaches every connection made after it is set ("": the
    system's), from its start: both ends have it as connected and accepted (set after
    the handshake, a switch away from BBR leaves the kernel pacing the connection); the
    default, reno, is what the fast-wire measurements chose."""
    try:
        _accl.set_tcp_congestion(chosen)
        assert _accl.tcp_congestion() == chosen
        want = chosen or _system_congestion_control()
        options = _accl_testing.tcp_channel_options()
        for end in ("", "connected ", "accepted "):
            assert options[end + "TCP_CONGESTION"] == want, (end, options)
    finally:
        _accl.set_tcp_congestion("")


def test_a_congestion_control_the_kernel_lacks_is_refused_naming_it(monkeypatch, caplog):
    """At job start: the user's choice refused is an error naming the knob; jax_accl's
    default refused (a kernel without reno) leaves the system's, with a warning."""
    from jax_accl import distributed
    from jax_accl.errors import AcclError

    with pytest.raises(ValueError, match="TCP congestion control 'no_such_cc': .*available"):
        _accl.set_tcp_congestion("no_such_cc")
    assert _accl.tcp_congestion() == ""
    monkeypatch.setenv("JAX_ACCL_TCP_CONGESTION", "no_such_cc")
    with pytest.raises(AcclError, match="JAX_ACCL_TCP_CONGESTION=no_such_cc: TCP congestion"):
        distributed._set_tcp_congestion()
    monkeypatch.delenv("JAX_ACCL_TCP_CONGESTION")
    monkeypatch.setitem(
        config.KNOBS,
        "JAX_ACCL_TCP_CONGESTION",
        dataclasses.replace(config.KNOBS["JAX_ACCL_TCP_CONGESTION"], default="no_such_cc"),
    )
    distributed._set_tcp_congestion()
    assert _accl.tcp_congestion() == ""
    assert "no_such_cc" in caplog.text and "keep the system's" in caplog.text


def test_the_departures_probe_is_no_refused_connection(listener, monkeypatch):
    """jax_accl.departures probes a peer's listener to tell a dead process from a live
    one: the live listener answers, and the probe is not counted among the refused
    connections (a stranger's), nor is it a connection that says nothing."""
    from jax_accl import departures

    _, port = listener
    monkeypatch.setattr(departures.c, "recoverability_enabled", lambda: False)
    departures.know_table([{"rails": [["lo", "127.0.0.1", port, 1.0]]}])
    try:
        before = _accl.stats()["refused_connections"]
        assert departures.died_elsewhere(0) is None  # it answers: alive
        assert talk(port, b"") == b""  # a silent connection, after the probe: counted
        assert wait_for_refused(before, 1) == 1
        time.sleep(0.2)
        assert _accl.stats()["refused_connections"] - before == 1  # the silent one only
    finally:
        departures.know_table(None)
