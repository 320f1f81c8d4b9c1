"""jax_accl's float16 lowering rules (jax_accl/half_collectives.py), in one process: while
XLA's collectives are jax_accl's, a float16 psum/pmax is emitted as a float32 all-reduce
and a float16 all_gather as a uint16 one; otherwise, and for any other dtype, JAX's own
lowering is unchanged. Their runs against gloo: tests/multiprocess/test_half_collectives.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from jax_accl import half_collectives

BODIES = {
    "psum": (lambda a: jax.lax.psum(a, "x"), "f32"),
    "pmax": (lambda a: jax.lax.pmax(a, "x"), "f32"),
    "all_gather": (lambda a: jax.lax.all_gather(a, "x", tiled=True), "ui16"),
}


def lowered(body, dtype) -> str:
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("x",))
    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
    return f.lower(jax.ShapeDtypeStruct((4, 8), dtype)).as_text()


def collective_ops(text: str) -> list[str]:
    """Each all-reduce's or all-gather's text in a lowered module, from its line to its
    type signature (`) -> tensor<...>`, after an all-reduce's reducer region)."""
    lines, found = text.splitlines(), []
    for i, line in enumerate(lines):
        if "stablehlo.all_reduce" in line or "stablehlo.all_gather" in line:
            end = next(j for j in range(i, len(lines)) if ") -> tensor<" in lines[j])
            found.append("\n".join(lines[i : end + 1]))
    return found


@pytest.mark.parametrize("op", sorted(BODIES))
def test_float16_is_carried_only_while_jax_accl_runs_xlas_collectives(op, monkeypatch):
    body, carrier = BODIES[op]
    half_collectives.install()
    half_collectives.install()  # idempotent: wraps JAX's rule once
    assert {"psum", "pmax", "pmin", "all_gather", "reduce_scatter"} <= set(
        half_collectives.installed()
    )
    monkeypatch.setattr(half_collectives, "active", lambda: False)
    plain = lowered(body, jnp.float16)
    plain_f32 = lowered(body, jnp.float32)
    assert f"tensor<4x8x{carrier}>" not in plain and "convert" not in plain
    monkeypatch.setattr(half_collectives, "active", lambda: True)
    ours = lowered(body, jnp.float16)
    assert f"tensor<4x8x{carrier}>" in ours  # the collective's operand, widened or bitcast
    ops = collective_ops(ours)
    assert len(ops) == 1, ours
    assert carrier in ops[0] and "f16" not in ops[0], ops[0]  # the collective itself
    assert "f16" in collective_ops(plain)[0]  # JAX's: the collective on float16
    assert ("bitcast_convert" if carrier == "ui16" else "stablehlo.convert") in ours
    assert lowered(body, jnp.float32) == plain_f32  # another dtype: JAX's rule as it is
