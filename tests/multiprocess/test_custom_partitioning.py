"""jax_accl calls inside jax.experimental.custom_partitioning rules, across two
processes with one input late in each: every launch exact. Each rule's lower_fn is
lowered as a module of its own when XLA partitions the program; before those calls got
lanes of their own (jax_accl/primitives/lanes.py) the four calls of the program carried
one lane, and a process's sum of one input was paired with its peer's of another (201
and 102 where 3 is right, within 100 launches). The worker:
jax_accl/testing/partition_worker.py."""

from jax_accl.testing import launch

WORKER = ["-m", "jax_accl.testing.partition_worker", "--launches", "100"]


def test_custom_partitioning_rules_are_exact_across_two_processes_with_an_input_late():
    results = launch.run_job(WORKER, 2, 1, env=[{"JAX_ACCL_TIMEOUT_S": "30"}] * 2, timeout=300)
    assert sorted(r["process"] for r in results) == [0, 1]
    assert [r["exact"] for r in results] == [100, 100], results
