"""Each jax_accl call of an executable is set up once, when XLA instantiates the
executable (the FFI instantiate stage: the group table decoded and checked), reused by
every launch and device, and freed with the executable."""

import gc

import jax
import jax.numpy as jnp
import numpy as np
import pytest
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


def test_an_exception_starting_a_call_is_its_error_and_leaves_no_call_counted(mesh8):
    """A failed allocation (injected: common/faults.h) while a call site starts a device's
    call: that call fails naming it, its peers waiting for it fail by the deadline naming
    the device that never came, no device stays counted in a call (the stall check,
    runtime/stall.h), and the next launch is exact."""
    from jax_accl import _accl_testing

    step = jax.jit(
        jax.shard_map(lambda x: jax_accl.psum(x, "i"), mesh=mesh8, in_specs=P("i"), out_specs=P())
    )
    x = put(mesh8, jnp.arange(16.0, dtype=jnp.float32), P("i"))
    compiled = step.lower(x).compile()
    devices = [d.id for d in mesh8.devices.flat]
    before = [_accl_testing.calls_in_progress(d) for d in devices]
    assert before == [0] * 8, before
    _accl_testing.arm_fault("allocation", 8)  # every device's call
    try:
        with pytest.raises(
            jax.errors.JaxRuntimeError, match=r"jax_accl.psum over .* on device \d+: std::bad_alloc"
        ):
            jax.block_until_ready(compiled(x))
    finally:
        _accl_testing.arm_fault("none", 0)
    assert [_accl_testing.calls_in_progress(d) for d in devices] == [0] * 8
    total = jax.block_until_ready(compiled(x))  # every device's part, not only the first
    np.testing.assert_allclose(np.asarray(total), np.arange(16.0).reshape(8, 2).sum(0))
    assert [_accl_testing.calls_in_progress(d) for d in devices] == [0] * 8
