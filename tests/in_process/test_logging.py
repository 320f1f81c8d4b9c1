"""JAX_ACCL_DEBUG: silent by default, the algorithm choice once at INFO, one line per
call and device at DEBUG; the op's name (the lowering's, from the runtime's plan) is the
algorithm that runs."""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.multiprocess  # each runs a fresh process

PROGRAM = """
import jax, numpy as np, jax_accl
from jax.sharding import NamedSharding, PartitionSpec as P
mesh = jax.make_mesh((4,), ("i",))
x = jax.device_put(np.ones((4, {count}), np.float32), NamedSharding(mesh, P("i")))
f = jax.jit(jax.shard_map(lambda a: jax_accl.allreduce(a, "i", algorithm="{algorithm}"),
                          mesh=mesh, in_specs=P("i"), out_specs=P("i"), check_vma=False))
for _ in range(2):
    f(x).block_until_ready()
"""


def run_with(level: str, count: int = 1024, algorithm: str = "auto") -> str:
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
        "JAX_ACCL_DEBUG": level,
    }
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM.format(count=count, algorithm=algorithm)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    return "\n".join(line for line in done.stderr.splitlines() if line.startswith("jax_accl"))


def test_silent_by_default():
    assert run_with("") == ""


def test_info_names_the_algorithm_once():
    lines = run_with("INFO").splitlines()
    assert len(lines) == 1, lines
    assert "1 group(s) of 4 devices, 1 array(s), 4KiB -> direct" in lines[0]


def test_debug_adds_a_line_per_call_and_device():
    lines = run_with("DEBUG").splitlines()
    calls = [line for line in lines if line.startswith("jax_accl DEBUG: device")]
    assert len(calls) == 8  # 2 calls x 4 devices
    assert all("accl_allreduce direct 4KiB" in line for line in calls)


@pytest.mark.parametrize(
    "count,algorithm",
    [(1024, "auto"), (1 << 18, "auto"), (1 << 18, "hierarchical"), (1 << 18, "ring")],
)
def test_the_ops_name_is_the_algorithm_that_runs(count, algorithm):
    """The lowering names the op (the INFO line, the profiler's HLO name) from the
    runtime's plan: a forced "hierarchical", which in one process has one level, is
    named as the model's pick that runs, as the native record of every call says."""
    lines = run_with("DEBUG", count, algorithm).splitlines()
    info = [line for line in lines if " -> " in line]
    assert len(info) == 1, lines
    named = info[0].rsplit(" -> ", 1)[1]
    ran = {
        line.split("accl_allreduce ", 1)[1].split()[0] for line in lines if "DEBUG: device" in line
    }
    assert ran == {named}, lines
    if algorithm not in ("auto", "hierarchical"):
        assert named == algorithm
