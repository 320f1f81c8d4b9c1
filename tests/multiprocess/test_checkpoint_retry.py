"""The README's checkpoint/retry loop (examples/two_hosts.py's train) through a failed
step: 2 processes train the example's MLP with its donated jax_accl.shard_map step; the
one process (either) is late for one step by more than JAX_ACCL_TIMEOUT_S (a checkpoint being
written, a slow compile), so that step's all-reduce fails on both processes. Each
process's `except jax.errors.JaxRuntimeError` catches it (at float(loss)), the loop puts
its last host copy of the state back on the mesh and runs the steps from there again:
training ends with parameters equal on both processes, and equal to the same job's run
without the failure (bitwise: the same steps on the same data).

The step holds two jax_accl calls (the loss and the gradients' bucket). A launch that
failed at one of them may have made the other in one process and not in the other (XLA
starts no call after a failed one): without jax_accl.recover() in the loop, the
processes' calls of that op then count different steps and a retry paired one process's
step 3 with the other's step 4 (2 runs of 4 here); the loop calls recover() first.

This file is also the job's worker (run by path: `python test_checkpoint_retry.py
--process-id ...`), so that the test and what each process runs read together."""

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "two_hosts.py"
TIMEOUT_S = 5.0  # JAX_ACCL_TIMEOUT_S of the job
LATE_S = 7.5  # the late process's pause: past the deadline, within two of them
LATE_STEP = 5  # the step it is late for
STEPS, CHECKPOINT_EVERY = 8, 3  # so the loop goes back from step 5 to step 3


@pytest.mark.parametrize("late_process", [1, 0])
def test_a_failed_step_is_run_again_from_the_checkpoint_and_training_ends_alike(late_process):
    from jax_accl.testing import launch

    results = launch.run_job(
        [str(Path(__file__).resolve())],
        2,
        1,
        extra=["--steps", str(STEPS), "--checkpoint-every", str(CHECKPOINT_EVERY)]
        + ["--batch", "32"],
        env=[
            {"JAX_ACCL_TIMEOUT_S": str(TIMEOUT_S), "LATE_FOR_A_STEP": str(int(p == late_process))}
            for p in range(2)
        ],
        timeout=240,
    )
    for r in results:
        assert r["step_holds"] == {"accl_allreduce": 2}, r  # the loss and the gradients
        assert r["clean"]["failures"] == 0, r
        assert r["failed"]["failures"] >= 1, r
        assert r["failed"]["printed"] and all("jax_accl" in x for x in r["failed"]["printed"]), r
        # The run through the failure ended as the run without it.
        assert r["failed"]["params"] == r["clean"]["params"], r
        assert r["failed"]["losses"] == r["clean"]["losses"], r
        assert len(r["clean"]["losses"]) == STEPS
        assert r["clean"]["losses"][-1] < r["clean"]["losses"][0]
        assert r["recoveries"] >= 1, r
    late = results[late_process]
    early = results[1 - late_process]
    # The early process waited for the late one until its deadline: its error says so.
    assert "timed out" in early["failed"]["printed"][0], early
    assert early["failed"]["params"] == late["failed"]["params"]  # one replicated model


def example():
    spec = importlib.util.spec_from_file_location("two_hosts", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def worker(argv):
    import contextlib
    import hashlib
    import io
    import time

    import jax
    import numpy as np
    import optax
    from jax.experimental import multihost_utils

    import jax_accl

    two_hosts = example()
    args = two_hosts.parse_args(argv)
    mesh = two_hosts.join(args)
    optimizer = optax.adam(1e-3)
    train_step = two_hosts.make_train_step(mesh, optimizer)
    batch = two_hosts.make_batches(mesh, args.batch)
    place = two_hosts.placer(mesh)

    def fresh():
        params = place(two_hosts.init_params(jax.random.key(0), args.width))
        return params, place(optimizer.init(params))

    def run(batch):
        printed = io.StringIO()  # what the loop says when a step fails
        with contextlib.redirect_stdout(printed):
            params, _, losses, failures = two_hosts.train(
                train_step, *fresh(), batch, args.steps, place, args.checkpoint_every
            )
        leaves = [np.asarray(leaf) for leaf in jax.tree.leaves(jax.device_get(params))]
        digest = hashlib.sha256(b"".join(leaf.tobytes() for leaf in leaves)).hexdigest()
        return {
            "params": digest,
            "losses": losses,
            "failures": failures,
            "printed": printed.getvalue().splitlines(),
        }

    # Compiled on both processes before either calls it: the first call is not late.
    holds = jax_accl.collectives(train_step, *fresh(), *batch(0))["jax_accl"]
    multihost_utils.sync_global_devices("compiled")
    clean = run(batch)

    late_for = {LATE_STEP} if os.environ.get("LATE_FOR_A_STEP") == "1" else set()

    def late_batch(i):
        if i in late_for:  # once: the steps run again are on time
            late_for.discard(i)
            time.sleep(LATE_S)
        return batch(i)

    failed = run(late_batch)
    result = {
        "step_holds": holds,
        "clean": clean,
        "failed": failed,
        "recoveries": jax_accl.stats()["recoveries"],
    }
    jax.distributed.shutdown()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    worker(sys.argv[1:])
