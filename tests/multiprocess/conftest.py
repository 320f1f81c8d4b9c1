"""Fixtures of the multi-process tests."""

import os

import pytest

from jax_accl.testing import netns


@pytest.fixture
def root_required():
    """Network namespaces (virtual hosts): they need root, which CI has, so there a
    machine without them is a failure, not a skip."""
    if not netns.can_create_namespaces():
        if os.environ.get("CI"):
            pytest.fail("CI runs as root: network namespaces must be available")
        pytest.skip("network namespaces need root")
