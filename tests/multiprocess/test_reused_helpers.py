"""A helper holding a jax_accl call (a psum, an all_to_all, a ragged_all_to_all), used
twice in one program (a nested jax.jit, a jax.checkpoint block; identical checkpointed
FSDP blocks), across processes: every result exact. Before each use had a lane of its
own, the two uses shared one and a process's first use was reduced with its peer's
second (201 and 102 where 3 and 300 are right, 13 launches of 60). The worker:
jax_accl/testing/reuse_worker.py (each use delayed on another rank: with the lanes
shared, every op and helper fails 3 runs of 3)."""

from jax_accl.testing import launch, netns, reuse_worker

WORKER = ["-m", "jax_accl.testing.reuse_worker", "--iterations", "100"]


def assert_exact(results):
    assert len(results) == 2
    for r in results:
        assert r["helpers"] == reuse_worker.checked_keys(100), r
        assert r["fsdp"]["calls"]["accl_all_gather"] >= 4, r
    assert results[0]["fsdp"]["loss"] == results[1]["fsdp"]["loss"]


def test_helpers_used_twice_are_exact_across_two_processes_of_one_host():
    results = launch.run_job(WORKER, 2, 1, env=[{"JAX_ACCL_TIMEOUT_S": "30"}] * 2, timeout=300)
    assert_exact(results)


def test_helpers_used_twice_are_exact_across_namespaced_hosts(root_required):
    with netns.virtual_hosts(2, 2) as names:
        env = [
            {"JAX_ACCL_HOST_ID": n, "JAX_ACCL_RAILS": "rail0,rail1", "JAX_ACCL_TIMEOUT_S": "30"}
            for n in names
        ]
        results = launch.run_job(
            [*WORKER, "--gloo-interface", "rail0"],
            2,
            1,
            env=env,
            namespaces=names,
            coordinator_ip=netns.rail_ip(0, 0),
            timeout=300,
        )
    assert_exact(results)
