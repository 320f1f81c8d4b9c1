"""bfloat16 on the wire (jax_accl/wire_dtype.py) on 8 devices of one process: every
device ends with the same bits, the rank-order algorithms bitwise equal to the NumPy
model of the rounding, every algorithm bitwise equal to jax_accl's bfloat16 sum of the
operands rounded once; integer and other refusals; the knob through routing (jax.lax.psum
and the gradient all-reduce autodiff makes) and its absence."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax_accl
from jax_accl import config
from jax_accl.testing.wire_rows import TIES, rank_order_sum, rows, to_wire

ALGORITHMS = ["direct", "ring", "halving_doubling", "reduce_broadcast", "auto"]


def sharded(mesh, table):
    return jax.make_array_from_callback(
        table.shape, NamedSharding(mesh, P(mesh.axis_names)), lambda i: table[i]
    )


def per_device(array) -> list[np.ndarray]:
    return [
        np.asarray(s.data).reshape(-1)
        for s in sorted(array.addressable_shards, key=lambda s: s.device.id)
    ]


def allreduce_each(mesh, x, reduce):
    f = jax.shard_map(reduce, mesh=mesh, in_specs=P("i"), out_specs=P("i"), check_vma=False)
    return per_device(jax.jit(f)(x))


def assert_same_bits_everywhere(outs):
    for d, out in enumerate(outs):
        np.testing.assert_array_equal(out.view(np.uint32), outs[0].view(np.uint32), f"device {d}")


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("n,count", [(8, 1000), (8, 2**18 + 3), (3, 77), (5, 4099)])
def test_every_device_holds_the_same_bits_as_the_model(algorithm, n, count):
    mesh = jax.make_mesh((n,), ("i",), devices=jax.devices()[:n])
    table = rows(n, count)
    x = sharded(mesh, table)
    outs = allreduce_each(
        mesh, x, lambda v: jax_accl.allreduce(v, "i", algorithm=algorithm, wire_dtype=jnp.bfloat16)
    )
    assert outs[0].dtype == np.float32
    assert_same_bits_everywhere(outs)
    # The definition: the operands rounded once, then jax_accl's bfloat16 sum, widened.
    wire = allreduce_each(
        mesh,
        sharded(mesh, to_wire(table)),
        lambda v: jax_accl.allreduce(v, "i", algorithm=algorithm).astype(jnp.float32),
    )
    np.testing.assert_array_equal(outs[0].view(np.uint32), wire[0].view(np.uint32))
    if algorithm in ("direct", "reduce_broadcast"):  # rank order: the NumPy model, bitwise
        np.testing.assert_array_equal(
            outs[0].view(np.uint32), rank_order_sum(table).view(np.uint32)
        )
    exact = table.astype(np.float64).sum(0)
    scale = np.abs(table).astype(np.float64).sum(0)
    assert np.all(np.abs(outs[0] - exact) <= scale * 2.0**-8 * n)  # bf16: n roundings
    assert not np.array_equal(outs[0], table.sum(0))  # it did round


def test_ties_round_to_nearest_even():
    """One device holds the ties, the other zeros: the sum is each tie rounded once."""
    mesh = jax.make_mesh((2,), ("i",), devices=jax.devices()[:2])
    table = np.stack([TIES, np.zeros_like(TIES)])
    outs = allreduce_each(
        mesh, sharded(mesh, table), lambda v: jax_accl.psum(v, "i", wire_dtype=jnp.bfloat16)
    )
    want = np.array([1, 1 + 2**-6, 1 + 2**-7, -1, -(1 + 2**-6), 3 * 2**-9], np.float32)
    np.testing.assert_array_equal(outs[0], want)
    np.testing.assert_array_equal(outs[1], want)


def test_pytree_pmean_and_bfloat16_leaves(mesh8):
    """float32 leaves travel as bfloat16, bfloat16 leaves as they are, in one bucket;
    pmean divides the rounded sum."""
    table = rows(8, 300)
    x = sharded(mesh8, table)
    xb = sharded(mesh8, to_wire(table))

    def body(a, b):
        return jax_accl.psum({"a": a, "b": b}, "i", wire_dtype=jnp.bfloat16), jax_accl.pmean(
            a, "i", wire_dtype=jnp.bfloat16
        )

    f = jax.jit(jax.shard_map(body, mesh=mesh8, in_specs=P("i"), out_specs=P("i"), check_vma=False))
    tree, mean = f(x, xb)
    assert tree["a"].dtype == jnp.float32 and tree["b"].dtype == jnp.bfloat16
    a, b, m = (per_device(v)[3] for v in (tree["a"], tree["b"], mean))
    np.testing.assert_array_equal(a, b.astype(np.float32))
    np.testing.assert_array_equal(m, a / np.float32(8))


@pytest.mark.parametrize(
    "dtype", [jnp.int32, jnp.int8, jnp.uint16, jnp.bool_, jnp.float16, jnp.complex64]
)
def test_integers_and_other_dtypes_are_refused(mesh8, dtype):
    f = jax.shard_map(
        lambda v: jax_accl.psum(
            {"w": v.astype(jnp.float32), "n": v.astype(dtype)}, "i", wire_dtype=jnp.bfloat16
        ),
        mesh=mesh8,
        in_specs=P("i"),
        out_specs=P(),
    )
    name = np.dtype(dtype).name
    with pytest.raises(
        TypeError,
        match=rf"jax_accl.psum: wire_dtype=bfloat16 is for float32 values .* leaf 0 is {name}",
    ):
        jax.jit(f)(sharded(mesh8, np.arange(8)))


def test_bad_wire_dtype_and_op_are_refused(mesh8):
    def run(reduce):
        f = jax.shard_map(reduce, mesh=mesh8, in_specs=P("i"), out_specs=P())
        return jax.jit(f)(sharded(mesh8, np.ones(8, np.float32)))

    with pytest.raises(
        ValueError, match=r"jax_accl.psum: wire_dtype must be jnp.bfloat16 .*float16"
    ):
        run(lambda v: jax_accl.psum(v, "i", wire_dtype=jnp.float16))
    with pytest.raises(ValueError, match=r"jax_accl.pmax: wire_dtype applies to sums .*'max'"):
        run(lambda v: jax_accl.allreduce(v, "i", op="max", wire_dtype=jnp.bfloat16))


def test_bad_knob_is_refused(monkeypatch, mesh8):
    monkeypatch.setenv("JAX_ACCL_WIRE_DTYPE", "fp16")
    f = jax.shard_map(lambda v: jax_accl.psum(v, "i"), mesh=mesh8, in_specs=P("i"), out_specs=P())
    with pytest.raises(ValueError, match="JAX_ACCL_WIRE_DTYPE='fp16': expected bfloat16"):
        jax.jit(f)(sharded(mesh8, np.ones(8, np.float32)))


def _routed_step(mesh):
    """A routed data-parallel step: jax.lax.psum of a float32 and an int32 value, and the
    gradient of a replicated parameter (the all-reduce autodiff makes of pvary)."""

    def loss(w, v):
        return jnp.sum((v * w) ** 2)

    def body(w, v, k):
        return jax.lax.psum(v, "i"), jax.lax.psum(k, "i"), jax.grad(loss)(w, v)

    return jax.jit(
        jax_accl.shard_map(body, mesh=mesh, in_specs=(P(), P("i"), P("i")), out_specs=P())
    )


def test_the_knob_routes_float32_sums_over_the_wire_as_bfloat16(mesh8):
    table = rows(8, 257)
    x = sharded(mesh8, table)
    k = sharded(mesh8, (np.arange(8 * 257).reshape(8, 257) * 99991).astype(np.int32))
    w = jnp.asarray(rows(1, 257)[0])
    plain = _routed_step(mesh8)(w, x, k)
    # Set within the process after a float32 trace: knob_set makes JAX trace anew (on jax
    # 0.12.1 a bare change of the variable left the gradient's all-reduce float32, its
    # transpose reused from the first trace).
    with config.knob_set("JAX_ACCL_WIRE_DTYPE", "bfloat16"):
        step = _routed_step(mesh8)
        hlo = step.lower(w, x, k).compile().as_text()
        total, ints, grad = step(w, x, k)
    # float32 sums on the bfloat16-wire target, the int32 one on the plain one.
    assert 'custom_call_target="accl_allreduce_bf16_wire"' in hlo
    assert 'custom_call_target="accl_allreduce"' in hlo
    assert "all-reduce(" not in hlo  # every all-reduce jax_accl's
    for v in (total, grad):
        assert_same_bits_everywhere(per_device(v))
    # The sum is jax_accl's bfloat16 sum of the rounded operands; the integers stay exact.
    auto = allreduce_each(
        mesh8, sharded(mesh8, to_wire(table)), lambda v: jax_accl.psum(v, "i").astype(jnp.float32)
    )
    np.testing.assert_array_equal(per_device(total)[0], auto[0])
    np.testing.assert_array_equal(np.asarray(ints), np.asarray(plain[1]))
    assert not np.array_equal(np.asarray(total), np.asarray(plain[0]))
    # The gradient's all-reduce travelled as bfloat16 too: within bf16's rounding of
    # float32's, and not equal to it.
    g, g32 = np.asarray(grad), np.asarray(plain[2])
    assert not np.array_equal(g, g32)
    np.testing.assert_allclose(g, g32, rtol=2**-6, atol=1e-3 * np.abs(g32).max())


def test_patch_psum_with_the_knob(monkeypatch, mesh8):
    monkeypatch.setenv("JAX_ACCL_WIRE_DTYPE", "bfloat16")
    table = rows(8, 100)
    f = jax.jit(
        jax.shard_map(lambda v: jax.lax.psum(v, "i"), mesh=mesh8, in_specs=P("i"), out_specs=P())
    )
    with jax_accl.patch_psum():
        got = np.asarray(f(sharded(mesh8, table)))
    want = allreduce_each(
        mesh8, sharded(mesh8, to_wire(table)), lambda v: jax_accl.psum(v, "i").astype(jnp.float32)
    )[0]
    np.testing.assert_array_equal(got.reshape(-1), want)


def test_default_is_float32_on_the_wire(mesh8):
    """Without wire_dtype or the knob the sum is float32's, in rank order: bitwise."""
    table = rows(8, 100)
    got = allreduce_each(
        mesh8, sharded(mesh8, table), lambda v: jax_accl.allreduce(v, "i", algorithm="direct")
    )
    want = table[0].copy()
    for row in table[1:]:
        want = want + row
    np.testing.assert_array_equal(got[0], want)


def test_grad_through_psum_with_wire_dtype(mesh8):
    """jax.grad of a psum given wire_dtype: the rounding's transpose rounds the
    cotangent, the all-reduce's is a pvary (no data moved), as psum's: every device's
    gradient is 2 * the rounded sum, exactly (a power of 2 times a bfloat16 value)."""

    def body(v):
        return jnp.sum(jax_accl.psum(v, "i", wire_dtype=jnp.bfloat16) ** 2), jax_accl.psum(
            v, "i", wire_dtype=jnp.bfloat16
        )

    f = jax.shard_map(body, mesh=mesh8, in_specs=P("i"), out_specs=(P(), P()))
    x = sharded(mesh8, rows(8, 16))
    g, total = jax.jit(jax.grad(lambda v: f(v)[0]))(x), jax.jit(f)(x)[1]
    np.testing.assert_array_equal(np.asarray(g), np.broadcast_to(2 * np.asarray(total), g.shape))
    assert np.array_equal(np.asarray(total), to_wire(np.asarray(total)).astype(np.float32))
