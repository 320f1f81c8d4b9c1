"""The demo's training loop, short: the loss falls, the compiled step holds no XLA
collective, its gradient is the global batch's mean gradient, and the parameters match
the same step under jax.shard_map (as 2 processes: tests/multiprocess/test_bench_processes.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import Mesh

import jax_accl
from jax_accl.demo import training as demo


def _mesh():
    return Mesh(np.array(jax.devices()), ("data",))


def test_training_matches_jax_lax_and_learns():
    result = demo.run(_mesh(), steps=25, batch_per_device=32, quiet=True)
    assert result["last_loss"] < 0.5 * result["first_loss"]
    assert result["accuracy"] > 0.5  # 8 classes: chance is 12.5%
    assert result["max_param_difference"] < 1e-5
    assert result["accl_calls_per_step_per_device"] == 1  # gradients + loss, fused
    ours, theirs = result["compiled_step"]["jax_accl"], result["compiled_step"]["jax.lax"]
    assert ours == {
        "xla all-reduce": 0,
        "xla reduce-scatter": 0,
        "xla all-gather": 0,
        "xla collective-permute": 0,
        "jax_accl calls": 1,
    }
    assert theirs["xla all-reduce"] >= 1 and theirs["jax_accl calls"] == 0


def test_the_printed_parameter_difference_says_why_there_is_one(capsys):
    demo.run(_mesh(), steps=2, batch_per_device=8, quiet=False)
    (line,) = [
        line
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("largest parameter difference from the jax.lax run: ")
    ]
    assert "float32 rounding: jax_accl and XLA add the devices' gradients in different" in line
    assert "2 steps of training amplify that" in line


def test_compiled_demo_step_has_no_xla_all_reduce():
    """The exact step the demo runs, compiled: jax_accl's calls only."""
    mesh = _mesh()
    optimizer = optax.adam(1e-3)
    params = demo.init_params(0)
    x, y = demo.global_batch(mesh, *demo.make_dataset(8 * 16, seed=1))
    step = demo.build_step(mesh, optimizer, "jax_accl")
    text = step.lower(params, optimizer.init(params), x, y).compile().as_text()
    assert "all-reduce(" not in text and "reduce-scatter(" not in text
    assert "all-gather(" not in text
    assert text.count('custom_call_target="accl_allreduce"') == 1


def test_gradient_is_the_global_batch_mean():
    """One data-parallel SGD step over 8 devices equals one step on a single device over
    the whole batch (SGD: a gradient 8x too large would show; Adam would hide it)."""
    mesh = _mesh()
    optimizer = optax.sgd(0.5)
    params = demo.init_params(0)
    x_all, y_all = demo.make_dataset(8 * 16, seed=1)
    x, y = demo.global_batch(mesh, x_all, y_all)
    step = demo.build_step(mesh, optimizer, "jax_accl")
    got, _, loss = step(params, optimizer.init(params), x, y)

    params = demo.init_params(0)
    want_loss, grads = jax.value_and_grad(demo.loss_fn)(
        params, jnp.asarray(x_all), jnp.asarray(y_all)
    )
    want = optax.apply_updates(params, optimizer.update(grads, optimizer.init(params))[0])
    np.testing.assert_allclose(float(loss), float(want_loss), rtol=1e-5)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("strategy", ["fsdp", "tp", "pp"])
def test_sharded_gradients_are_the_global_batch_means(strategy):
    """Each sharded strategy's loss and gradients (value_and_grad of its global loss
    under jax_accl.shard_map, laid out as it keeps its parameters) equal the model's on
    one device over the whole batch: unlike Adam's steps, these show a gradient of the
    wrong scale."""
    from jax.sharding import PartitionSpec as P

    from jax_accl.demo import strategies

    mesh = strategies.mesh_for(jax.devices(), strategy)
    params, _ = demo.initial_state(mesh, optax.adam(1e-3), strategy)
    param_spec = strategies.param_specs(strategy, len(demo.HIDDEN) + 1)
    data = strategies.batch_spec(strategy)
    x_all, y_all = demo.make_dataset(8 * 16, seed=1)
    x, y = demo.global_batch(mesh, x_all, y_all, strategy)
    loss = strategies.global_loss(strategy, demo.loss_fn, demo.logits_loss, demo.CLASSES)
    value_and_grad = jax.jit(
        jax_accl.shard_map(
            jax.value_and_grad(loss),
            mesh=mesh,
            in_specs=(param_spec, data, data),
            out_specs=(P(), param_spec),
        )
    )
    got_loss, got = value_and_grad(params, x, y)
    want_loss, want = jax.value_and_grad(demo.loss_fn)(
        demo.init_params(0), jnp.asarray(x_all), jnp.asarray(y_all)
    )
    np.testing.assert_allclose(float(got_loss), float(want_loss), rtol=1e-5)
    for g, w in zip(jax.tree.leaves(demo.layers(got, strategy)), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("strategy", ["fsdp", "tp", "pp"])
def test_sharded_strategies_match_jax_lax_with_no_xla_collective(strategy):
    """--strategy fsdp / tp / pp: parameters and adam state sharded; the same step written with
    jax.lax, under jax_accl.shard_map, compiles to jax_accl's calls only and trains as
    jax.lax's does; the data-parallel run of the same model agrees too."""
    from jax_accl.demo import strategies

    mesh = strategies.mesh_for(jax.devices(), strategy)
    result = demo.run(mesh, steps=12, batch_per_device=16, quiet=True, strategy=strategy)
    dp = demo.run(_mesh(), steps=12, batch_per_device=16, quiet=True)
    assert result["last_loss"] < 0.7 * result["first_loss"]
    assert result["max_param_difference"] < 1e-5
    np.testing.assert_allclose(result["losses"], dp["losses"], rtol=1e-4)
    ours, theirs = result["compiled_step"]["jax_accl"], result["compiled_step"]["jax.lax"]
    assert {k: v for k, v in ours.items() if k.startswith("xla")} == dict.fromkeys(
        ("xla all-reduce", "xla reduce-scatter", "xla all-gather", "xla collective-permute"), 0
    )
    assert theirs["jax_accl calls"] == 0
    if strategy == "fsdp":  # the per-parameter gathers (and scatters) fused into buckets
        gathers_and_scatters = theirs["xla all-gather"] + theirs["xla reduce-scatter"]
        assert 2 <= ours["jax_accl calls"] < gathers_and_scatters / 2, (ours, theirs)
    else:  # each a chain: a layer's collective needs the one before
        assert ours["jax_accl calls"] >= 4
    if strategy == "pp":  # 3 hops a time step, 6 time steps, both ways
        assert theirs["xla collective-permute"] >= 12 and ours["jax_accl calls"] >= 12
    else:
        assert theirs["xla all-gather"] > 0 and theirs["xla reduce-scatter"] > 0
