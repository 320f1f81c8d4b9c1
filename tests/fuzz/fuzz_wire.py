"""Fuzz the wire parsers (atheris): the TCP handshake's hello, both sides of the
handshake's exchange (the acceptor's state machine fed a connector's bytes, the
connector fed a listener's challenge and verdict) and the frame headers of ChannelLink,
fed arbitrary bytes through the native module. Every input must be either accepted
exactly when it is valid (and then deliver the right payload) or refused with an error;
a made-up proof is never admitted; never a crash, a hang or a wrong payload.

    python tests/fuzz/fuzz_wire.py -runs=3000        # the CI run (tests/fuzz/test_fuzz.py)
    python tests/fuzz/fuzz_wire.py -max_total_time=3600   # the long run
"""

import glob
import importlib.util
import os
import struct
import sys

import atheris


def load_native():
    """jax_accl._accl_testing alone: importing the package would import (and instrument)
    jax."""
    package = os.path.dirname(importlib.util.find_spec("jax_accl").origin)
    path = glob.glob(os.path.join(package, "_accl_testing.*.so"))[0]
    spec = importlib.util.spec_from_file_location("jax_accl._accl_testing", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_accl_testing = load_native()

HELLO = struct.Struct("<IIqqIIdQ16s")  # magic, version, src, dst, rail, stripe, weight, space,
# nonce
FRAME = struct.Struct("<IIQQQQ")  # magic, epoch, tag, plan, seq, bytes
HANDSHAKE_MAGIC, FRAME_MAGIC, TAG = 0x4C434341, 0x46434341, 42
PROTOCOL_VERSION = 5  # transport/handshake.h


@atheris.instrument_func
def check_hello(raw: bytes):
    message = _accl_testing.parse_hello(raw)
    valid = (
        len(raw) >= HELLO.size
        and raw[:8] == struct.pack("<II", HANDSHAKE_MAGIC, PROTOCOL_VERSION)
        and 0 < HELLO.unpack(raw[: HELLO.size])[6] <= 1e6  # the rail's weight
    )
    assert (message == "") == valid, (raw[:48], message)


@atheris.instrument_func
def check_frames(raw: bytes, expected: int, tcp: bool = False):
    error, payload = _accl_testing.receive_frames(raw, expected, 2.0 if tcp else 0.002, tcp)
    valid = len(raw) >= FRAME.size + expected
    if valid:
        magic, epoch, tag, plan, seq, nbytes = FRAME.unpack(raw[: FRAME.size])
        valid = (
            magic == FRAME_MAGIC
            and epoch == 0
            and tag == TAG
            and plan == 0
            and seq == 0
            and nbytes == expected
        )
    assert (error == "") == valid, (raw[:40], expected, error)
    if valid:
        assert payload == raw[FRAME.size : FRAME.size + expected]


SECRET = b"fuzzing secret of thirty-two b.."


@atheris.instrument_func
def check_acceptor(raw: bytes):
    """The acceptor's state machine fed a connector's bytes: a response nobody computed
    from this run's nonce never gets in, whatever came before it."""
    verdict = _accl_testing.accept_handshake(raw, SECRET)
    assert verdict != "", raw[:80]
    if len(raw) < HELLO.size:
        assert "closed" in verdict, (raw[:80], verdict)


@atheris.instrument_func
def check_connector(reply: bytes):
    """The connector against a listener answering `reply` (challenge, verdict): without a
    proof computed from the connector's own nonce it never goes on."""
    assert _accl_testing.connect_handshake(reply, SECRET) != "", reply[:60]


@atheris.instrument_func
def test_one_input(data: bytes):
    fdp = atheris.FuzzedDataProvider(data)
    mode = fdp.ConsumeIntInRange(0, 5)
    if mode == 0:
        check_hello(fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 100)))
    elif mode == 1:  # a near-valid handshake with one field changed
        fields = [HANDSHAKE_MAGIC, PROTOCOL_VERSION, 1, 2, 0, 0, 1.0, 0, b"\0" * 16]
        k = fdp.ConsumeIntInRange(0, 3)
        if k == 3:  # the channel space: any value is well-formed
            fields[7] = fdp.ConsumeIntInRange(0, 2**64 - 1)
        elif k == 2:  # the weight: nan, infinities, zero, negative, too large, or fine
            fields[6] = fdp.PickValueInList(
                [float("nan"), float("inf"), -float("inf"), 0.0, -1.0, 1e7, 2.5]
            )
        else:
            fields[k] = fdp.ConsumeIntInRange(0, 2**32 - 1)
        check_hello(HELLO.pack(*fields)[: fdp.ConsumeIntInRange(0, HELLO.size)])
    elif mode == 4:  # a valid hello (or a mutated one), then whatever follows
        fields = [HANDSHAKE_MAGIC, PROTOCOL_VERSION, 1, 2, 0, 0, 1.0, 0, b"\0" * 16]
        if fdp.ConsumeBool():
            fields[fdp.ConsumeIntInRange(0, 5)] = fdp.ConsumeIntInRange(0, 2**31 - 1)
        check_acceptor(HELLO.pack(*fields) + fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 80)))
    elif mode == 5:
        check_connector(fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 60)))
    elif mode == 2:
        check_frames(fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 300)), fdp.ConsumeIntInRange(0, 256))
    else:  # a near-valid frame: one header field changed, or cut short
        expected = fdp.ConsumeIntInRange(0, 256)
        fields = [FRAME_MAGIC, 0, TAG, 0, 0, expected]
        k = fdp.ConsumeIntInRange(0, 6)
        if k < 6:
            fields[k] = fdp.ConsumeIntInRange(0, 2**32 - 1)
        frame = FRAME.pack(*fields) + fdp.ConsumeBytes(expected)
        cut = frame[: fdp.ConsumeIntInRange(0, len(frame))] if k == 6 else frame
        check_frames(cut, expected, tcp=fdp.ConsumeBool())  # a memory ring, or loopback TCP


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
