"""Test set-up: 8 CPU devices in this process, before JAX initialises its backend; the
kind of every test (the markers pyproject.toml registers):

- multiprocess: the test starts other Python processes (a job of several, or a fresh
  interpreter): every test of tests/multiprocess/, and those elsewhere marked so. A test
  that starts one without the marker fails (tests/conftest.py watches subprocess.Popen);
- netns: the test builds namespaced hosts (root): those that request `root_required`, or
  marked so. Where namespaces cannot be made such a test is skipped, but in CI (CI set),
  which runs as root, it fails: it must run there;
- soak: every test of tests/soak/;
- fast: none of these; `scripts/test.sh --fast` runs them (`pytest -m fast`);
- native, besides its kind: every test of tests/native/ (the native core through its
  harness, whatever JAX's version: CI runs them on one Python only, .ci/run);
- once, besides its kind: a test whose subject does not change with JAX's version (the
  launcher, the benchmark's tables and its checks before measuring, marked where they
  are; every test of tests/fuzz/, the wire parsers, marked here): CI runs them on one
  Python only too. A test that runs JAX programs for what it checks is not one.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_ACCL_TIMEOUT_S", "60")
# The default cost model, whatever `bench --calibrate` stored on this machine.
import tempfile  # noqa: E402

os.environ["JAX_ACCL_CACHE"] = tempfile.mkdtemp(prefix="jax_accl_test_cache_")
# The tests state the wire where they shape one (netns.stated_wire): the model's own
# otherwise, whatever the caller's shell says.
os.environ.pop("JAX_ACCL_LINK_GBITS", None)  # and the connections: jax_accl's default
os.environ.pop("JAX_ACCL_TCP_CONGESTION", None)

TESTS = Path(__file__).resolve().parent
KINDS = ("multiprocess", "netns", "soak")
KIND_OF_DIRECTORY = {"multiprocess": "multiprocess", "soak": "soak"}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        path = Path(item.path).resolve()
        if path.is_relative_to(TESTS) and path.relative_to(TESTS).parts[0] in KIND_OF_DIRECTORY:
            item.add_marker(KIND_OF_DIRECTORY[path.relative_to(TESTS).parts[0]])
        if "root_required" in item.fixturenames:
            item.add_marker("netns")
        if item.get_closest_marker("netns"):
            item.add_marker("multiprocess")  # namespaced hosts are processes inside them
        if path.is_relative_to(TESTS / "native"):
            item.add_marker("native")
        if path.is_relative_to(TESTS / "fuzz"):
            item.add_marker("once")
        if not any(item.get_closest_marker(kind) for kind in KINDS):
            item.add_marker("fast")


def require_namespaces():
    """Network namespaces (virtual hosts): they need root, which CI has, so there a
    machine without them is a failure, not a skip."""
    from jax_accl.testing import netns

    if not netns.can_create_namespaces():
        if os.environ.get("CI"):
            pytest.fail("CI runs as root: network namespaces must be available")
        pytest.skip("network namespaces need root")


def pytest_runtest_setup(item):
    if item.get_closest_marker("netns"):
        require_namespaces()


@pytest.fixture
def root_required():
    """The test builds namespaced hosts: marks it netns (see the module's docstring)."""
    require_namespaces()


def starts_python(args) -> bool:
    argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
    return any(
        os.fspath(a) == sys.executable or Path(os.fsdecode(a)).name.startswith("python")
        for a in argv
    )


@pytest.fixture(autouse=True)
def _processes_only_where_marked(request):
    """A test not marked multiprocess that starts a Python process fails (at teardown):
    the marker is what keeps the fast set fast."""
    if request.node.get_closest_marker("multiprocess"):
        yield
        return
    started = []
    popen_init = subprocess.Popen.__init__

    def watched(self, args, *rest, **kwargs):
        if starts_python(args):
            started.append(args)
        popen_init(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = watched
    try:
        yield
    finally:
        subprocess.Popen.__init__ = popen_init
    if started:
        pytest.fail(
            f"{request.node.nodeid} starts Python processes ({started[0]!r}) but is not "
            "marked multiprocess (@pytest.mark.multiprocess): see tests/conftest.py",
            pytrace=False,
        )
