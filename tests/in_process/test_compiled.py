"""jax_accl.collectives: what a compiled program's collectives are, read from its HLO."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

import jax_accl
from jax_accl import fallback_warning


def test_it_tells_xlas_collectives_from_jax_accls_calls():
    mesh = Mesh(np.array(jax.devices()), ("i",))
    x = jnp.arange(8.0 * 5).reshape(8, 5)

    def body(a):
        return jax.lax.psum(a, "i"), jax.lax.all_gather(a * 2, "i", tiled=True)

    xla_step = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=(P(), P("i"))))
    found = jax_accl.collectives(xla_step, x)
    assert found["xla"]["all-reduce"]["ops"] == 1
    assert found["xla"]["all-gather"]["ops"] == 1
    assert found["jax_accl"] == {}
    assert found["xla_collectives_on"] in ("none", "gloo", "mpi")
    ours = jax_accl.collectives(
        jax_accl.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=(P(), P("i"))), x
    )
    assert ours["xla"] == {}
    assert ours["jax_accl"] == {"accl_allreduce": 1, "accl_all_gather": 1}


def test_a_variadic_all_reduce_counts_its_operands():
    mesh = Mesh(np.array(jax.devices()), ("i",))
    f = jax.shard_map(
        lambda a, b: jax.lax.psum((a, b), "i"), mesh=mesh, in_specs=P("i"), out_specs=P()
    )
    found = jax_accl.collectives(f, np.ones((8, 3), np.float32), np.ones((8, 2), np.float32))
    assert found["xla"]["all-reduce"]["buffers"] >= 1
    assert sum(c["ops"] for c in found["xla"].values()) >= 1


def test_jax_accl_pmean_in_a_plain_shard_map_warns_once_that_gradients_stay_xlas():
    """Warned where the program is lowered (here: the collectives() call, this file's
    line), naming the function the user called and what it holds."""
    import warnings

    fallback_warning.reset()
    mesh = Mesh(np.array(jax.devices()), ("i",))
    w = jnp.ones((5,))
    x = jnp.arange(8.0 * 5).reshape(8, 5)

    def loss(w, x):
        return jax_accl.pmean(jnp.sum(x * w), "i")

    plain = jax.jit(jax.shard_map(jax.grad(loss), mesh=mesh, in_specs=(P(), P("i")), out_specs=P()))
    with pytest.warns(jax_accl.AcclWarning, match="jax_accl.shard_map") as caught:
        found = jax_accl.collectives(plain, w, x)
    assert found["xla"]["all-reduce"]["ops"] >= 1  # what it warns about: the gradient's
    (warning,) = [w for w in caught if issubclass(w.category, jax_accl.AcclWarning)]
    assert str(warning.message).startswith("jax_accl.pmean inside jax.shard_map")
    assert "jax_accl.psum" not in str(warning.message)
    assert "1 XLA all-reduce(s)" in str(warning.message)
    assert warning.filename == __file__  # the user's line, not jax_accl's
    routed = jax.jit(
        jax_accl.shard_map(jax.grad(loss), mesh=mesh, in_specs=(P(), P("i")), out_specs=P())
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: neither again, nor under jax_accl.shard_map
        assert jax_accl.collectives(routed, w, x)["xla"] == {}
        fallback_warning.reset()
        jax_accl.collectives(routed, w, x)


def test_jax_accl_psum_in_a_plain_shard_map_without_gradients_does_not_warn():
    """Every all-reduce of the program is jax_accl's: nothing to warn of."""
    import warnings

    fallback_warning.reset()
    mesh = Mesh(np.array(jax.devices()), ("i",))
    step = jax.jit(
        jax.shard_map(
            lambda x: jax_accl.pmean(x * 2, "i") + jax_accl.psum(x, "i"),
            mesh=mesh,
            in_specs=P("i"),
            out_specs=P(),
        )
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = jax_accl.collectives(step, jnp.arange(8.0 * 3).reshape(8, 3))
        step(jnp.ones((8, 3))).block_until_ready()
    assert found["xla"] == {} and found["jax_accl"]["accl_allreduce"] >= 1


@pytest.mark.parametrize("collective", ["psum_scatter", "all_gather", "ppermute"])
def test_the_sharding_collectives_warn_in_a_plain_shard_map_too(collective):
    fallback_warning.reset()
    mesh = Mesh(np.array(jax.devices()), ("i",))
    n = mesh.size
    ops = {
        "psum_scatter": lambda y: jax_accl.psum_scatter(y, "i", tiled=True),
        "all_gather": lambda y: jax_accl.all_gather(y, "i", tiled=True),
        "ppermute": lambda y: jax_accl.ppermute(y, "i", [(k, (k + 1) % n) for k in range(n)]),
    }

    def loss(w, x):  # w replicated: its gradient needs an all-reduce over "i"
        return jnp.sum(ops[collective](x @ w))

    step = jax.jit(jax.shard_map(jax.grad(loss), mesh=mesh, in_specs=(P(), P("i")), out_specs=P()))
    with pytest.warns(jax_accl.AcclWarning, match=f"jax_accl.{collective} inside jax.shard_map"):
        found = jax_accl.collectives(step, jnp.ones((4, 4)), jnp.ones((n * n, 4)))
    assert found["xla"]["all-reduce"]["ops"] == 1  # what it warns about


@pytest.mark.parametrize("check_vma", [True, False])
@pytest.mark.parametrize("wrap", ["jax.shard_map", "jax_accl.shard_map"])
def test_a_gradient_taken_outside_a_shard_map_holding_jax_accl_calls_is_jax_accls(wrap, check_vma):
    """jax.grad(shard_map(f)): the all-reduce of a replicated input's gradient is made
    by shard_map's transpose (pvary's transpose under check_vma=True, a psum of the
    cotangents under check_vma=False), outside f: routed where f holds jax_accl calls."""
    mesh = Mesh(np.array(jax.devices()), ("i",))
    w = jnp.linspace(-1.0, 1.0, 20).reshape(5, 4)
    x = jnp.arange(8.0 * 2 * 5).reshape(16, 5) / 50

    def loss_with(psum):
        return lambda w, x: psum(jnp.sum(jnp.tanh(x @ w)), "i")

    def grad_of(shard_map, psum):
        f = shard_map(
            loss_with(psum), mesh=mesh, in_specs=(P(), P("i")), out_specs=P(), check_vma=check_vma
        )
        return jax.jit(jax.grad(f))

    shard_map = jax_accl.shard_map if wrap == "jax_accl.shard_map" else jax.shard_map
    ours = grad_of(shard_map, jax_accl.psum)
    found = jax_accl.collectives(ours, w, x)
    assert found["xla"] == {}, found
    assert found["jax_accl"]["accl_allreduce"] >= 1
    reference = grad_of(jax.shard_map, jax.lax.psum)
    assert jax_accl.collectives(reference, w, x)["xla"]["all-reduce"]["ops"] >= 1
    np.testing.assert_allclose(ours(w, x), reference(w, x), rtol=1e-6)
