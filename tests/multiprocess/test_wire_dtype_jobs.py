"""bfloat16 on the wire across processes (tests/multiprocess/scripts/wire_dtype_job.py):
every device of every process ends with the same bits, equal to jax_accl's bfloat16
sum of the operands rounded once, and to the NumPy model of the rounding where the order
of the additions is fixed; two processes of one host (shared memory, cross-memory
attach), two namespaced hosts (TCP over both rails, the hierarchy), routed jax.lax.psum
with the knob, and XLA's own all-reduce (JAX_ACCL_XLA_COLLECTIVES=1) with the knob; and
at 4 MiB per device, where the schedules stream (the pair exchange, the hierarchy's
pipeline) and cross-memory attach runs, compared by digest (SHA-256 of the bytes)."""

import hashlib
from pathlib import Path

import numpy as np

from jax_accl.testing import launch, netns
from jax_accl.testing.wire_rows import rank_order_sum, rows

JOB = [str(Path(__file__).parent / "scripts" / "wire_dtype_job.py")]
KNOB = {"JAX_ACCL_WIRE_DTYPE": "bfloat16", "JAX_ACCL_TIMEOUT_S": "60"}
COUNT = 4099
LARGE = (1 << 20) + 3  # 4 MiB of float32 and a tail


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


def assert_bfloat16_between_hosts(results, algorithms):
    """Each algorithm's float32 sum sent as many bytes between hosts as the bfloat16
    all-reduce of the rounded operands (float32 on the wire would send twice as many)."""
    for algorithm in algorithms:
        sent = [
            (r[algorithm + " tcp bytes"], r[algorithm + " of rounded operands tcp bytes"])
            for r in results
        ]
        assert any(bf16 > 0 for _, bf16 in sent), (algorithm, sent)  # some process sent
        for wire, bf16 in sent:  # a process that sends nothing between hosts: 0 and 0
            assert 0.9 * bf16 <= wire <= 1.1 * bf16, (algorithm, sent)


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
    assert_bfloat16_between_hosts(results, algorithms)


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


def digest_of(values: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(values, np.float32).tobytes()).hexdigest()


def assert_one_digest(results, variant, n) -> str:
    got = [d for r in results for d in r[variant]]
    assert len(got) == n and len(set(got)) == 1, (variant, got)
    return got[0]


def check_large(results, algorithms, n, rank_order=()):
    """Every device the same bytes, those of jax_accl's bfloat16 sum of the rounded
    operands (and of the NumPy model where the additions run in rank order)."""
    table = rows(n, LARGE)
    for algorithm in algorithms:
        got = assert_one_digest(results, algorithm, n)
        assert got == assert_one_digest(results, algorithm + " of rounded operands", n), algorithm
        if algorithm in rank_order:
            assert got == digest_of(rank_order_sum(table)), algorithm
        assert got != digest_of(table.sum(0))
    assert assert_one_digest(results, "routed", n) == assert_one_digest(
        results, "auto of rounded operands", n
    )


def run_large(processes, devices, algorithms, **kw):
    extra = ["--algorithms", ",".join(algorithms), "--count", str(LARGE), "--digest"]
    return launch.run_job(JOB, processes, devices, extra=extra, timeout=300, **kw)


def test_large_two_processes_of_two_devices():
    """The hierarchy's tiers (threads' peer memory, shared memory between the processes)
    pipelined, cross-memory attach (reduce_broadcast), the streamed ring."""
    algorithms = ["auto", "direct", "ring", "halving_doubling", "reduce_broadcast", "hierarchical"]
    results = run_large(2, 2, algorithms, env=[KNOB, KNOB])
    check_large(results, algorithms, 4, rank_order=("direct", "reduce_broadcast"))


def test_large_two_processes_of_one_device():
    """Two ranks: the pair exchange streamed over shared memory, cross-memory attach."""
    algorithms = ["auto", "ring", "halving_doubling", "reduce_broadcast"]
    results = run_large(2, 1, algorithms, env=[KNOB, KNOB])
    check_large(results, algorithms, 2, rank_order=algorithms)


def test_large_two_namespaced_hosts_of_two_processes(root_required):
    """Every tier at once: shared memory between the processes of a host, TCP between
    the hosts (the pipelined hierarchy, the pair exchange between hosts)."""
    algorithms = ["auto", "hierarchical", "ring"]
    with netns.virtual_hosts(2, 1) as names:
        first, second = list(names)
        hosts = [first, first, second, second]
        extra = ["--algorithms", ",".join(algorithms), "--count", str(LARGE), "--digest"]
        results = launch.run_on_namespaced_hosts(
            JOB, hosts, 1, "rail0", extra=extra, env=[KNOB] * 4, timeout=300
        )
    check_large(results, algorithms, 4)
    assert_bfloat16_between_hosts(results, algorithms)


def test_large_xla_all_reduce_with_the_knob():
    env = {**KNOB, "JAX_ACCL_XLA_COLLECTIVES": "1"}
    extra = ["--xla", "--count", str(LARGE), "--digest"]
    results = launch.run_job(JOB, 2, 1, extra=extra, env=[env, env], timeout=300)
    got = assert_one_digest(results, "xla_sum", 2)
    assert got == digest_of(rank_order_sum(rows(2, LARGE)))
