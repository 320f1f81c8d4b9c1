"""The package's layers: the library never imports its tooling (bench/, testing/, demo/),
nor the tests' native harness (_accl_testing, a module of its own beside _accl, sharing
its core), config.py is the only reader of JAX_ACCL_* (the native core reads none), the
knob table of docs/knobs.md is config's, each tool's --help works from the installed package, and
an import from a source tree without the compiled module says what to do."""

import ast
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import jax_accl
from jax_accl import _accl, _accl_testing, config
from jax_accl.errors import AcclError
from jax_accl.testing.threads import allreduce_threads

PACKAGE = Path(jax_accl.__file__).resolve().parent
REPO = Path(__file__).resolve().parents[2]
TOOLING = ("bench", "testing", "demo")


def library_modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).parts
        if parts[0] not in TOOLING:
            yield path


def imported_modules(path: Path):
    """Every module `path` imports, at the top or inside a function, as absolute names."""
    package = ".".join(("jax_accl",) + path.relative_to(PACKAGE).parent.parts)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1]
                    + ([base] if base else [])
                )
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def test_the_library_imports_no_tooling():
    offending = {
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in library_modules()
        for name in imported_modules(path)
        if name.split(".")[:2] in (["jax_accl", t] for t in TOOLING)
    }
    assert not offending
    assert len(list(library_modules())) > 20  # the walk saw the library


def module_name(path: Path) -> str:
    parts = ("jax_accl",) + path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_circle_of_imports_among_the_packages_files():
    """Each module imports only modules below it: no file reaches itself through the
    files it imports (at the top or inside a function). `from jax_accl import config`
    is an edge to jax_accl.config; the compiled modules (_accl, _accl_testing) are
    leaves."""
    modules = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    compiled = {"jax_accl._accl", "jax_accl._accl_testing"}

    def module_of(imported):
        while imported and imported not in modules:
            imported = imported.rpartition(".")[0]
        return imported

    graph = {}
    for name, path in modules.items():
        targets = set()
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                names = [f"{base}.{alias.name}" for alias in node.names]
                inner = [n for n in names if n in modules or n in compiled]
                imported = inner or [base]
            else:
                continue
            targets |= {module_of(n) for n in imported if n not in compiled}
        graph[name] = targets - {"", name}
    assert {"jax_accl.reduction", "jax_accl.routing_state"} <= graph["jax_accl.routing"]
    circles = []
    state = {}

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                circles.append(" -> ".join(stack[stack.index(nxt) :] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not circles, "import circles:\n" + "\n".join(circles)


HARNESS = {
    "allreduce_threads",
    "allreduce_threads_channels",
    "hierarchical_threads",
    "hierarchical_threads_report",
    "parse_hello",
    "accept_handshake",
    "connect_handshake",
    "tcp_channel_options",
    "tcp_peer_end",
    "receive_frames",
    "arm_fault",  # test-only faults of the native core (common/faults.h)
    "wire_kernel",  # the bfloat16 wire's kernels alone (tests/native/test_wire_bf16.py)
    "calls_in_progress",
    "mark_process_unusable",
    "cma_lanes",
    "shm_names_left",  # a process's own /dev/shm segments still named (test_recovery.py)
}


def test_the_test_harness_is_not_in_the_module_users_import():
    """xla_ffi/bindings/testing.cc and xla_ffi/testing/ are jax_accl._accl_testing, which
    no library module imports; jax_accl._accl (what jax_accl loads) has none of them."""
    public = {name for name in vars(_accl_testing) if not name.startswith("_")}
    assert public == HARNESS
    assert not HARNESS & set(vars(_accl))
    library = Path(_accl.__file__).read_bytes()
    for marker in (
        b"hierarchical_threads",
        b"simulated_hosts",
        b"run_on_simulated_hosts",
        b"arm_fault",
        b"run_cma_lanes",
    ):
        assert marker not in library, marker
    assert b"run_on_simulated_hosts" in Path(_accl_testing.__file__).read_bytes()
    offending = {
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in library_modules()
        for name in imported_modules(path)
        if name.startswith("jax_accl._accl_testing")
    }
    assert not offending


def test_both_modules_share_one_core():
    """A call through the harness is counted in jax_accl.stats() and ended by
    jax_accl.abort(): one native core (libjax_accl_core.so), not a copy per module."""
    before = jax_accl.stats()["algorithms"]["ring"]["calls"]
    allreduce_threads([np.ones(8, np.float32)] * 2, "sum", "ring")
    assert jax_accl.stats()["algorithms"]["ring"]["calls"] == before + 2
    threading.Timer(0.3, jax_accl.abort).start()
    start = time.monotonic()
    with pytest.raises(AcclError, match="aborted by jax_accl.abort"):
        allreduce_threads([np.ones(8, np.float32)] * 2, "sum", "ring", timeout_s=30, present=[0])
    assert time.monotonic() - start < 10


@pytest.mark.multiprocess  # a fresh process
def test_importing_and_running_jax_accl_loads_no_tooling():
    script = (
        "import sys, jax, jax_accl\n"
        "mesh = jax.sharding.Mesh(jax.devices()[:2], ('i',))\n"
        "f = jax.jit(jax_accl.shard_map(lambda x: jax_accl.psum(x, 'i'), mesh=mesh,\n"
        "            in_specs=jax.P('i'), out_specs=jax.P()))\n"
        "assert float(f(jax.numpy.ones(4))[0]) == 2.0\n"
        "print(sorted(m for m in sys.modules if m.split('.')[:2] in\n"
        f"      [['jax_accl', t] for t in {TOOLING + ('_accl_testing',)!r}]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd="/"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_config_is_the_only_reader_of_the_environment():
    reads = re.compile(r"os\.environ|getenv")
    readers = {
        str(path.relative_to(PACKAGE))
        for path in library_modules()
        if reads.search(path.read_text())
    }
    assert readers == {"config.py"}
    native = {
        str(p.relative_to(REPO))
        for p in (REPO / "xla_ffi").rglob("*.[ch]*")
        if reads.search(p.read_text())
    }
    assert native == set()


def test_every_knob_parses_its_default_and_names_itself_when_wrong(monkeypatch):
    for name in config.KNOBS:
        monkeypatch.delenv(name, raising=False)
        config.value(name)
    for name, bad in [
        ("JAX_ACCL_TIMEOUT_S", "-1"),
        ("JAX_ACCL_TIMEOUT_S", "nan"),
        ("JAX_ACCL_ALGORITHM", "bogus"),
        ("JAX_ACCL_FUSION_BYTES", "0"),
        ("JAX_ACCL_ROUTING", "yes"),
        ("JAX_ACCL_STRIPES_PER_RAIL", "0"),
        ("JAX_ACCL_CMA", "2"),
        ("JAX_ACCL_PIPELINE_CHUNKS", "-1"),
        ("JAX_ACCL_DEBUG", "TRACE"),
        ("JAX_ACCL_TCP_CONGESTION", "reno;rm"),
    ]:
        monkeypatch.setenv(name, bad)
        with pytest.raises(ValueError, match=f"{name}='{bad}': expected"):
            config.value(name)
        monkeypatch.delenv(name)
    monkeypatch.setenv("JAX_ACCL_FUSION_BYTES", "4MiB")
    assert config.current().fusion_bytes == 4 << 20


def test_the_readme_knob_table_is_configs():
    assert config.markdown_table() in (REPO / "docs" / "knobs.md").read_text()
    assert "docs/knobs.md" in (REPO / "README.md").read_text()


@pytest.mark.multiprocess  # a fresh process each
@pytest.mark.parametrize("tool", ["bench", "plan", "demo"])
def test_each_tool_has_help_from_the_installed_package(tool):
    done = subprocess.run(
        [sys.executable, "-m", f"jax_accl.{tool}", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: python -m jax_accl.{tool}")


@pytest.mark.multiprocess  # a fresh process
def test_a_source_tree_without_the_compiled_module_says_what_to_do(tmp_path):
    shutil.copytree(
        PACKAGE,
        tmp_path / "jax_accl",
        symlinks=False,
        ignore=shutil.ignore_patterns("_accl*", "__pycache__"),
    )
    (tmp_path / "CMakeLists.txt").write_text("# a checkout\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", "import jax_accl"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: jax_accl was imported from the source tree")
    assert "pip install -e ." in last and "another directory" in last


def test_every_test_the_failure_guarantees_name_exists():
    """docs/failure.md cites a test for each guarantee: each must exist."""
    section = (REPO / "docs" / "failure.md").read_text()
    python_tests = "".join(p.read_text() for p in (REPO / "tests").rglob("test_*.py"))
    selftest = "".join(p.read_text() for p in (REPO / "xla_ffi" / "selftest").glob("*.cc"))
    cited = set(re.findall(r"\b(test_[a-z0-9_]+)\b(?!\.py)", section))
    assert len(cited) >= 12, cited
    for name in sorted(cited):
        assert f"def {name}(" in python_tests or f"void {name}(" in selftest, name
    for path in re.findall(r"`(tests/[\w/]+\.py)", section):
        assert (REPO / path).exists(), path


def test_the_native_default_deadline_is_the_knobs_default():
    """The deadline is written once on each side: the native core's, where nobody set
    one (common/wait.h), is JAX_ACCL_TIMEOUT_S's default."""
    header = (REPO / "xla_ffi" / "common" / "wait.h").read_text()
    native = re.search(r"kDefaultCallTimeoutSeconds = ([0-9.]+);", header).group(1)
    assert float(native) == float(config.KNOBS["JAX_ACCL_TIMEOUT_S"].default)
    literal = re.compile(r"timeout_s\s*[=:]\s*120|: 120\.0;")
    sources = sorted((REPO / "xla_ffi").rglob("*.[ch]*"))
    assert not [p for p in sources if literal.search(p.read_text())]
