"""jax_accl.collectives: what a compiled program's collectives are, read from its HLO."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

import jax_accl


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


def test_jax_accl_psum_in_a_plain_shard_map_warns_once_that_gradients_stay_xlas(monkeypatch):
    import warnings

    from jax_accl import api

    monkeypatch.setattr(api, "_warned_fallback", False)
    mesh = Mesh(np.array(jax.devices()), ("i",))
    w = jnp.ones((5,))
    x = jnp.arange(8.0 * 5).reshape(8, 5)

    def loss(w, x):
        return jax_accl.pmean(jnp.sum(x * w), "i")

    plain = jax.jit(jax.shard_map(jax.grad(loss), mesh=mesh, in_specs=(P(), P("i")), out_specs=P()))
    with pytest.warns(jax_accl.AcclWarning, match="jax_accl.shard_map"):
        found = jax_accl.collectives(plain, w, x)
    assert found["xla"]["all-reduce"]["ops"] >= 1  # what it warns about: the gradient's
    routed = jax.jit(
        jax_accl.shard_map(jax.grad(loss), mesh=mesh, in_specs=(P(), P("i")), out_specs=P())
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: neither again, nor under jax_accl.shard_map
        assert jax_accl.collectives(routed, w, x)["xla"] == {}
        monkeypatch.setattr(api, "_warned_fallback", False)
        jax_accl.collectives(routed, w, x)
