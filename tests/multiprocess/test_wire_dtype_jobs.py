"""bfloat16 on the wire across processes (tests/multiprocess/scripts/wire_dtype_job.py):
every device of every process ends with the same bits, equal to jax_accl's bfloat16
sum of the operands rounded once, and to the NumPy model of the rounding where the order
of the additions is fixed; two processes of one host (shared memory, cross-memory
attach), two namespaced hosts (TCP over both rails, the hierarchy), routed jax.lax.psum
with the knob, and XLA's own all-reduce (JAX_ACCL_XLA_COLLECTIVES=1) with the knob."""

from pathlib import Path

import numpy as np

from jax_accl.testing import launch, netns
from jax_accl.testing.wire_rows import rank_order_sum, rows

JOB = [str(Path(__file__).parent / "scripts" / "wire_dtype_job.py")]
KNOB = {"JAX_ACCL_WIRE_DTYPE": "bfloat16", "JAX_ACCL_TIMEOUT_S": "60"}
COUNT = 4099


def devices_bits(results, variant) -> np.ndarray:
    """Every device's result, process by process, as uint32 rows."""
    return np.array([bits for r in results for bits in r[variant]], np.uint32)


def assert_one_result_everywhere(results, variant, n) -> np.ndarray:
    bits = devices_bits(results, variant)
    assert bits.shape == (n, COUNT), (variant, bits.shape)
    for d in range(n):
        np.testing.assert_array_equal(bits[d], bits[0], f"{variant}: device {d}")
    return bits[0]


def check_jax_accl_variants(results, algorithms, n, rank_order=()):
    table = rows(n, COUNT)
    for algorithm in algorithms:
        got = assert_one_result_everywhere(results, algorithm, n)
        by_hand = assert_one_result_everywhere(results, algorithm + " of rounded operands", n)
        np.testing.assert_array_equal(got, by_hand, algorithm)
        if algorithm in rank_order:
            np.testing.assert_array_equal(got, rank_order_sum(table).view(np.uint32), algorithm)
        assert not np.array_equal(got, table.sum(0).view(np.uint32))  # it did round
    routed = assert_one_result_everywhere(results, "routed", n)  # the knob, routed
    np.testing.assert_array_equal(routed, devices_bits(results, "auto of rounded operands")[0])


def run(processes, devices, algorithms, **kw):
    extra = ["--algorithms", ",".join(algorithms), "--count", str(COUNT)]
    return launch.run_job(JOB, processes, devices, extra=extra, timeout=240, **kw)


def test_two_processes_of_two_devices_every_algorithm():
    algorithms = ["auto", "direct", "ring", "halving_doubling", "reduce_broadcast", "hierarchical"]
    results = run(2, 2, algorithms, env=[KNOB, KNOB])
    check_jax_accl_variants(results, algorithms, 4, rank_order=("direct", "reduce_broadcast"))


def test_two_namespaced_hosts_over_both_rails(root_required):
    algorithms = ["auto", "ring", "halving_doubling", "hierarchical"]
    with netns.virtual_hosts(2, 2) as names:
        extra = ["--algorithms", ",".join(algorithms), "--count", str(COUNT)]
        results = launch.run_on_namespaced_hosts(
            JOB, list(names), 2, "rail0,rail1", extra=extra, env=[KNOB, KNOB], timeout=240
        )
    check_jax_accl_variants(results, algorithms, 4)


def test_xla_all_reduce_with_the_knob():
    """A plain jax.jit sum over 2 processes: XLA's all-reduce (MPI_Allreduce) on jax_accl,
    its float32 operands rounded once and summed as bfloat16 (two operands: one
    addition, the model's), the same bits in both; an int32 sum stays exact."""
    env = {**KNOB, "JAX_ACCL_XLA_COLLECTIVES": "1"}
    results = launch.run_job(
        JOB, 2, 1, extra=["--xla", "--count", str(COUNT)], env=[env, env], timeout=240
    )
    table = rows(2, COUNT)
    got = assert_one_result_everywhere(results, "xla_sum", 2)
    np.testing.assert_array_equal(got, rank_order_sum(table).view(np.uint32))
    assert not np.array_equal(got, table.sum(0).view(np.uint32))
    for r in results:
        assert r["xla_int_sum"] == (np.arange(16).reshape(2, 8) * 7).sum(0).tolist()
        assert r["calls"] >= 2
