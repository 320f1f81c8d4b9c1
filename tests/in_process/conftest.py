"""Fixtures of the in-process tests (8 CPU devices, set up by tests/conftest.py)."""

import jax
import pytest


@pytest.fixture(scope="module")
def mesh8():
    """A 1-D mesh "i" over this process's 8 devices."""
    return jax.make_mesh((8,), ("i",))


@pytest.fixture
def xla_pool_of_xla_size():
    """The runtime told, until the test ends, that XLA:CPU's pool has one thread per device
    (XLA's size for 8 devices on up to 8 cores; this process's client has jax_accl's 16):
    the pool that can leave a launch's devices without a thread (runtime/stall.h)."""
    from jax_accl import _accl

    as_made = _accl.xla_pool()
    _accl.set_xla_pool(8, 8)
    yield
    _accl.set_xla_pool(*as_made)
