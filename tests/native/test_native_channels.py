"""Native tier: the message path of every algorithm over byte-stream channels (the
framing and progress engine of the cross-process transports, on memory rings), and
the TCP listener's handshake against strangers."""

import os
import socket
import struct
import time

import numpy as np
import pytest

from jax_accl import _accl


def run_channels(
    inputs, algorithm, stripes=1, counts=None, op="sum", timeout_s=30.0, in_place=False
):
    outputs = inputs if in_place else [np.empty_like(x) for x in inputs]
    counts = counts or [x.size for x in inputs]
    errors = _accl.allreduce_threads_channels(
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


HANDSHAKE = struct.Struct("<II32sqqIId")  # xla_ffi/transport/tcp.h: Handshake
MAGIC, VERSION = 0x4C434341, 1


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
        return s.recv(16)


def test_strangers_are_refused_and_the_job_secret_admitted(listener):
    secret, port = listener
    strangers = [
        b"",  # says nothing
        b"GET / HTTP/1.0\r\n\r\n",  # wrong protocol
        os.urandom(HANDSHAKE.size),  # random bytes
        HANDSHAKE.pack(MAGIC, VERSION, b"x" * 32, 1, 7, 0, 0, 1.0),  # wrong secret
        HANDSHAKE.pack(MAGIC, VERSION + 1, secret, 1, 7, 0, 0, 1.0),  # other version
        HANDSHAKE.pack(MAGIC, VERSION, secret, 1, 99, 0, 0, 1.0),  # device not here
        HANDSHAKE.pack(MAGIC, VERSION, secret, 1, 7, 0, 0, 1.0)[:50],  # truncated
    ]
    before = _accl.stats()["refused_connections"]
    for payload in strangers:
        assert talk(port, payload) == b"", payload[:20]
    deadline = time.time() + 10
    while _accl.stats()["refused_connections"] - before < len(strangers) and time.time() < deadline:
        time.sleep(0.05)
    assert _accl.stats()["refused_connections"] - before == len(strangers)
    # The listener still serves the job after all that.
    assert talk(port, HANDSHAKE.pack(MAGIC, VERSION, secret, 1, 7, 0, 0, 1.0)) == b"K"
