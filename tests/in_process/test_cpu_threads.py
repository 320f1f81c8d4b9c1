"""jax_accl/cpu_threads.py: XLA:CPU's client is made with two threads per device (or one
per core) where nobody sized its pool, the setting held only while it is made; a
PJRT_NPROC or NPROC of the user's is left alone. (The loop this prevents from stalling:
tests/multiprocess/test_async_loop.py.)"""

import os

import pytest

from jax_accl import _accl, cpu_threads

told = []  # (threads, devices) the stall detection was told by each client made


def made_with(monkeypatch, environ, **kwargs):
    for name in ("PJRT_NPROC", "NPROC", "XLA_FLAGS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    seen = {}

    def make(**kw):
        seen["PJRT_NPROC"] = os.environ.get("PJRT_NPROC")
        return "client"

    as_made = _accl.xla_pool()
    try:
        assert cpu_threads.make_client_with_threads(make, **kwargs) == "client"
        seen["told"] = _accl.xla_pool()
    finally:
        _accl.set_xla_pool(*as_made)
    told.append(seen["told"])
    return seen["PJRT_NPROC"]


def test_two_threads_per_device_while_the_client_is_made(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert made_with(monkeypatch, {}, num_devices=8) == "16"
    assert "PJRT_NPROC" not in os.environ
    flags = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    assert made_with(monkeypatch, flags, num_devices=None) == "8"
    assert made_with(monkeypatch, {}, num_devices=None) == "2"  # one device: the cores
    assert told[-3:] == [(16, 8), (8, 4), (2, 1)]  # two per device: no stall possible


def test_more_cores_than_that_keep_a_thread_each(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert made_with(monkeypatch, {}, num_devices=8) == "64"


@pytest.mark.parametrize("name", ["PJRT_NPROC", "NPROC"])
def test_a_size_the_user_set_is_left_alone(monkeypatch, name):
    got = made_with(monkeypatch, {name: "3"}, num_devices=8)
    assert got == ("3" if name == "PJRT_NPROC" else None)
    assert os.environ[name] == "3"
    assert told[-1] == (3, 8)  # the stall detection knows this pool can stall
    made_with(monkeypatch, {name: "many"}, num_devices=8)
    assert told[-1] == (0, 8)  # a size it cannot read: unknown, as one that can stall


def test_the_process_client_told_the_stall_detection_its_pool():
    import jax

    jax.devices()  # the client made (by conftest.py's settings: 8 devices)
    assert _accl.xla_pool() == (cpu_threads.threads_for(8), 8)


def test_the_cpu_client_is_made_through_it():
    from jax._src.lib import xla_client

    assert getattr(xla_client.make_cpu_client, "_jax_accl_wrapped", False)
