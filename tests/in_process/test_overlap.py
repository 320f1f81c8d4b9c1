"""Calls XLA can overlap: the compiled call carries data only, several calls of a device
run at once (matched by lane and sequence, not by the order XLA happens to run them),
results stay exact beside compute that reads and writes the same buffers, and a
training step's gradient reduction is cut into buckets in reverse layer order."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
from accl_testing import P, assert_same, put, run

import jax_accl
from jax_accl import _accl
from jax_accl.fusion import bucket_bytes

ACCL_CALL = re.compile(
    r"= (\(.*?\)|\S+) custom-call\(([^)]*)\), custom_call_target=\"accl_allreduce\""
)


def accl_calls(text: str) -> list[tuple[str, str]]:
    """(result type, operands) of every accl custom call in compiled HLO text."""
    return ACCL_CALL.findall(text)


def f32_bytes(hlo_type: str) -> int:
    """Bytes of the f32 arrays in an HLO type, e.g. "(f32[256,8]{1,0}, f32[])"."""
    dims = re.findall(r"f32\[([\d,]*)\]", hlo_type)
    return sum(4 * int(np.prod([int(d) for d in shape.split(",") if d])) for shape in dims)


def independent_reductions(lib, a, b, c, m):
    """Three all-reduces with no data dependency among them, beside compute that reads
    the first one's input (which the all-reduce overwrites in place) and one that reads
    the last one's result."""
    for _ in range(6):  # enough thunks that XLA:CPU runs them as a graph, not in order
        m = jnp.tanh(m @ m) * 0.5
    ra = lib.psum(a, "i")
    rb = lib.psum(b, "i")
    rc = lib.psum(c * 3, "i")
    return ra, rb, rc * 2 + 1, a * 7 + 1, m


def test_concurrent_calls_are_exact_and_in_flight_together(mesh8):
    """Large calls (each on a call thread of its own) of different sizes and dtypes in one
    program, run 20 times: bitwise equal to jax.lax, and the process saw several calls in
    flight at once."""
    a = np.arange(8 * 300_001, dtype=np.int32).reshape(8, -1) % 1000 - 500
    b = (np.arange(8 * 70_000, dtype=np.int64).reshape(8, -1) % 77).astype(np.int8)
    c = np.linspace(-4, 4, 8 * 50_000, dtype=np.float32).reshape(8, -1)
    m = np.full((8, 64, 64), 0.01, np.float32)
    specs = [P("i")] * 4
    outs = (P(), P(), P(), P("i"), P("i"))
    want = run("lax", independent_reductions, mesh8, specs, outs, a, b, c, m)
    _accl.reset_stats()
    for _ in range(20):
        got = run("accl", independent_reductions, mesh8, specs, outs, a, b, c, m)
        assert_same(got, want)
    assert jax_accl.stats()["max_calls_in_flight"] > 8  # one per rank: a device had two


def test_compiled_call_has_no_operand_or_result_but_data(mesh8):
    x = jax.ShapeDtypeStruct((8, 1000), np.float32, sharding=jax.NamedSharding(mesh8, P("i")))
    fn = jax.jit(
        jax.shard_map(
            lambda a, b: (jax_accl.psum(a, "i"), jax_accl.pmax(b * 2, "i")),
            mesh=mesh8,
            in_specs=(P("i"), P("i")),
            out_specs=(P(), P()),
        )
    )
    text = fn.lower(x, x).compile().as_text()
    calls = accl_calls(text)
    assert len(calls) == 2, text
    for result, operands in calls:
        assert result == "f32[1,1000]{1,0}", result  # no tuple with a token
        assert operands.count("%") == 1 and "u32" not in operands, operands
    assert "partition-id" not in text


def mlp_params(widths, seed=0):
    rng = np.random.default_rng(seed)
    return [
        {
            "w": (rng.standard_normal((i, o)) / np.sqrt(i)).astype(np.float32),
            "b": np.zeros((o,), np.float32),
        }
        for i, o in zip(widths, widths[1:])
    ]


def mlp_loss(params, x, y):
    for layer in params[:-1]:
        x = jnp.tanh(x @ layer["w"] + layer["b"])
    out = x @ params[-1]["w"] + params[-1]["b"]
    return jnp.mean((out - y) ** 2)


def test_gradient_buckets_in_reverse_layer_order(mesh8, monkeypatch):
    """A 5-layer MLP's step under jax_accl.shard_map with 300 KiB buckets: no XLA
    collective; one jax_accl call per bucket, each at most the cap; the first call of the
    compiled program reduces the last layer's gradients (autodiff produces them first);
    results equal jax.lax's over 3 steps."""
    monkeypatch.setenv("JAX_ACCL_FUSION_BYTES", "300KiB")
    widths = [32, 256, 256, 256, 256, 8]
    params = mlp_params(widths)
    optimizer = optax.sgd(0.05)

    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(mlp_loss)(params, x, y)
        grads = jax.tree.map(lambda g: g / jax.lax.psum(1, "i"), grads)
        loss = jax.lax.pmean(loss, "i")
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    rng = np.random.default_rng(1)
    x = put(mesh8, rng.standard_normal((64, 32)).astype(np.float32), P("i"))
    y = put(mesh8, rng.standard_normal((64, 8)).astype(np.float32), P("i"))

    def build(shard_map):
        return jax.jit(
            shard_map(step, mesh=mesh8, in_specs=(P(), P(), P("i"), P("i")), out_specs=P())
        )

    accl_step, lax_step = build(jax_accl.shard_map), build(jax.shard_map)
    opt_state = optimizer.init(params)
    text = accl_step.lower(params, opt_state, x, y).compile().as_text()
    assert all(op not in text for op in ("all-reduce(", "reduce-scatter(", "all-gather(")), text
    calls = accl_calls(text)
    cap = 300 << 10
    first, later = bucket_bytes(cap)
    assert (first, later) == (cap, cap)
    sizes = [f32_bytes(result) for result, _ in calls]
    grads = sum(4 * (i * o + o) for i, o in zip(widths, widths[1:]))
    assert len(calls) >= 3, calls  # 812 KiB of gradients (and the loss) in 300 KiB buckets
    assert sum(sizes) == grads + 4
    assert all(s <= cap for s in sizes), sizes
    # HLO text lists instructions in the schedule's order: the last layer's first.
    assert "f32[256,8]" in calls[0][0] or "f32[8]" in calls[0][0], calls[0]
    state_a = state_b = (params, opt_state)
    for _ in range(3):
        *state_a, loss_a = accl_step(*state_a, x, y)
        *state_b, loss_b = lax_step(*state_b, x, y)
        assert_same(loss_a, loss_b)
    assert_same(state_a[0], state_b[0])


def test_bucket_sizes_follow_the_cost_model():
    first, later = bucket_bytes(1 << 40)
    model = _accl.get_cost_model()
    assert later == max(1 << 20, int(20 * model["alpha"] / model["beta"]))
    assert first == max(256 << 10, later // 4)
    assert bucket_bytes(100_000) == (100_000, 100_000)
