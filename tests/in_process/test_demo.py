"""The demo's training loop, short: the loss falls, one fused all-reduce per step, and
the parameters match the same run with jax.lax.pmean; also as 2 processes."""
import jax
import numpy as np
from jax.sharding import Mesh

from jax_accl import demo, launch


def test_training_matches_jax_lax_and_learns():
    mesh = Mesh(np.array(jax.devices()), ("data",))
    result = demo.run(mesh, steps=25, batch_per_device=32, timing_steps=0, quiet=True)
    assert result["last_loss"] < 0.5 * result["first_loss"]
    assert result["accuracy"] > 0.5  # 8 classes: chance is 12.5%
    assert result["max_param_difference"] < 1e-5
    assert result["accl_calls_per_step_per_device"] == 1  # gradients + loss, fused


def test_training_as_two_processes():
    results = launch.run_job(["-m", "jax_accl.demo", "--json", "--quiet"], 2, 4,
                             extra=["--steps", "12", "--batch", "32", "--timing-steps", "0"],
                             env=[{"JAX_ACCL_TIMEOUT_S": "60"}] * 2)
    for r in results:
        assert r["last_loss"] < 0.5 * r["first_loss"]
        assert r["max_param_difference"] < 1e-5
        assert r["accl_calls_per_step_per_device"] == 1
