"""patch_psum routes an unmodified train step's jax.lax.pmean through jax_accl."""
import jax
import jax.numpy as jnp
import numpy as np

import jax_accl

from accl_testing import P, assert_same, put, values


def unmodified_train_step(params, batch):
    """A data-parallel SGD step as written for jax.lax (no jax_accl in sight)."""
    def loss(p):
        pred = jnp.tanh(batch["x"] @ p["w"] + p["b"])
        return jnp.mean((pred - batch["y"]) ** 2)
    grads = jax.grad(loss)(params)
    grads = jax.lax.pmean(grads, "data")
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), jax.lax.psum(1, "data")


def build(mesh):
    return jax.jit(jax.shard_map(unmodified_train_step, mesh=mesh,
                                 in_specs=(P(), P("data")), out_specs=(P(), P())))


def test_patch_routes_and_unpatches():
    mesh = jax.make_mesh((8,), ("data",))
    params = {"w": values((4, 2), "float32"), "b": values((2,), "float32", seed=1)}
    batch = put(mesh, {"x": values((16, 4), "float32", seed=2),
                       "y": values((16, 2), "float32", seed=3)}, {"x": P("data"), "y": P("data")})
    plain = build(mesh)
    want = plain(params, batch)
    plain_hlo = plain.lower(params, batch).as_text()
    assert "accl_allreduce" not in plain_hlo

    original = jax.lax.pmean
    with jax_accl.patch_psum():
        assert jax.lax.pmean is jax_accl.pmean
        patched = build(mesh)
        hlo = patched.lower(params, batch).as_text()
        got = patched(params, batch)
    assert jax.lax.pmean is original
    # The pmean of both gradient leaves is one fused jax_accl call; what stays
    # stablehlo.all_reduce is JAX's own implicit sum in the transpose of the implicit
    # pvary of the replicated params (check_vma=True), which no public name reaches.
    assert hlo.count("accl_allreduce") >= 1
    assert hlo.count("stablehlo.all_reduce") == plain_hlo.count("stablehlo.all_reduce") - 2
    assert_same(got, want)
    assert int(np.asarray(got[1])) == 8
    # Outside the block a fresh trace is plain JAX again.
    again = build(mesh)
    assert "accl_allreduce" not in again.lower(params, batch).as_text()
