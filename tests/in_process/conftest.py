"""Fixtures of the in-process tests (8 CPU devices, set up by tests/conftest.py)."""

import jax
import pytest


@pytest.fixture(scope="module")
def mesh8():
    """A 1-D mesh "i" over this process's 8 devices."""
    return jax.make_mesh((8,), ("i",))
