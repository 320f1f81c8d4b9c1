"""Each jax_accl call of an executable is set up once, when XLA instantiates the
executable (the FFI instantiate stage: the group table decoded and checked), reused by
every launch and device, and freed with the executable."""

import gc

import jax
import jax.numpy as jnp
import numpy as np
from accl_testing import P, put

import jax_accl


def test_a_call_site_is_made_per_executable_reused_by_every_launch_and_freed_with_it(mesh8):
    def body(x, n):
        return jax_accl.psum(x, "i"), jax_accl.psum(n, "i")  # two dtypes: two calls

    step = jax.jit(jax.shard_map(body, mesh=mesh8, in_specs=(P("i"), P("i")), out_specs=(P(), P())))
    x = put(mesh8, jnp.arange(16.0, dtype=jnp.float32), P("i"))
    n = put(mesh8, jnp.arange(16, dtype=jnp.int32), P("i"))
    jax.clear_caches()  # what earlier tests left in JAX's caches goes first
    gc.collect()
    before = jax_accl.stats()["call_sites"]
    compiled = step.lower(x, n).compile()
    assert compiled.as_text().count('custom_call_target="accl_allreduce"') == 2
    for scale in (1, 2, 3):
        total, count = compiled(x * scale, n * scale)
        np.testing.assert_allclose(np.asarray(total), scale * np.arange(16.0).reshape(8, 2).sum(0))
        assert np.asarray(count).tolist() == (scale * np.arange(16).reshape(8, 2).sum(0)).tolist()
        # Two sites, whatever the launches and the eight devices that ran them.
        assert jax_accl.stats()["call_sites"] == before + 2
    del compiled, total, count, step
    jax.clear_caches()  # JAX's compilation caches hold the executable too
    gc.collect()
    assert jax_accl.stats()["call_sites"] == before


def test_the_pipeline_chunks_travel_with_the_call_as_its_deadline_does(mesh8, monkeypatch):
    """JAX_ACCL_PIPELINE_CHUNKS is read when a call is traced and carried by the call
    (an attribute of its custom call, beside timeout_ms), not read from a process-wide
    setting when it runs."""

    def lowered(chunks):
        monkeypatch.setenv("JAX_ACCL_PIPELINE_CHUNKS", chunks)
        step = jax.jit(
            jax.shard_map(
                lambda x: jax_accl.psum(x, "i"), mesh=mesh8, in_specs=P("i"), out_specs=P()
            )
        )
        return step.lower(put(mesh8, jnp.ones(16, jnp.float32), P("i"))).as_text()

    assert "pipeline_chunks = 3 : i64" in lowered("3")
    assert "pipeline_chunks = 0 : i64" in lowered("0")
