"""No two jax_accl calls of a program share a lane (jax_accl/primitives/lanes.py): a
helper holding a call (a psum, an all_to_all, a ragged_all_to_all) that JAX would
lower once and call from each use (a nested jax.jit, jax.checkpoint) is lowered once
per use, each call with its own lane, proved in the compiled HLO; a program whose
calls could not be told apart is refused at lowering, naming the helper; lowerings
without jax_accl calls are still cached. The programs also run exact on this
process's 8 devices (the multi-process runs, where shared lanes give wrong results:
tests/multiprocess/test_reused_helpers.py)."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jax_accl
from jax_accl.errors import AcclError
from jax_accl.primitives import lanes
from jax_accl.testing import reuse_worker


@pytest.fixture(scope="module")
def mesh():
    return Mesh(np.array(jax.devices()[:8]), ("x",))


def _spec(mesh, shape, dtype=np.int32):
    return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, P("x")))


def _call_keys(compiled_text: str) -> list:
    """(target, op id, lane) of every jax_accl custom call of a compiled program."""
    keys = []
    for line in compiled_text.splitlines():
        target = re.search(r'custom_call_target="(accl_\w+)"', line)
        if target:
            op_id, lane = (re.search(rf"{k} = (-?\d+)", line).group(1) for k in ("op_id", "lane"))
            keys.append((target.group(1), op_id, lane))
    return keys


def _specs(mesh, op):
    """The shapes of helper_twice's arguments for `op` (two uses)."""
    if op == "ragged":
        use = [(8, 24, 8), (8, 30, 8), *[(8, 16)] * 4]
    else:
        use = [(8, 1 << 16) if op == "psum" else (8 * 32, 256)]
    return [_spec(mesh, shape) for shape in use * 2]


XLA_OPS = {"psum": "all-reduce(", "all_to_all": "all-to-all(", "ragged": "ragged-all-to-all("}
TARGETS = {
    "psum": "accl_allreduce",
    "all_to_all": "accl_all_to_all",
    "ragged": "accl_ragged_all_to_all",
}


@pytest.mark.parametrize("op", reuse_worker.OPS)
@pytest.mark.parametrize("helper", reuse_worker.HELPERS)
def test_a_helper_used_twice_has_a_lane_per_use_in_the_compiled_program(mesh, helper, op):
    program = reuse_worker.helper_twice(mesh, helper, 0.0, op)
    text = program.lower(*_specs(mesh, op)).compile().as_text()
    keys = _call_keys(text)
    target = TARGETS[op]
    assert len(keys) == 2 and len(set(keys)) == 2 and {k[0] for k in keys} == {target}, keys
    assert XLA_OPS[op] not in text


def test_identical_checkpointed_fsdp_blocks_have_a_lane_per_call(mesh):
    program = reuse_worker.fsdp_blocks(mesh, jax_accl.shard_map, 4)
    weights = [_spec(mesh, (64, 64), np.float32)] * 4
    text = program.lower(weights, _spec(mesh, (32, 64), np.float32)).compile().as_text()
    keys = _call_keys(text)
    # 4 gathers forward, their recomputation and reduce-scatters backward, the loss's
    # all-reduce: each call its own lane (before the fix 10 calls shared 6 lanes).
    assert len(keys) >= 9 and len(set(keys)) == len(keys), keys
    assert not re.search(r"all-reduce\(|all-gather\(|reduce-scatter\(", text)


def test_a_program_whose_calls_share_a_lane_is_refused_naming_the_helper(mesh, monkeypatch):
    # A lowering cache that hands a helper's lowering back to its second use, as JAX's
    # own do: the check on the lowered module must refuse the program.
    monkeypatch.setattr(lanes.LoweringCache, "__setitem__", dict.__setitem__)

    def shared_reduction(v):
        return jax_accl.psum(v, "x")

    red = jax.jit(shared_reduction)
    program = jax.jit(
        jax.shard_map(
            lambda a, b: (red(a), red(b)), mesh=mesh, in_specs=(P("x"),) * 2, out_specs=(P(),) * 2
        )
    )
    spec = _spec(mesh, (8, 4))
    with pytest.raises(AcclError, match=r"shared_reduction.*calls from 2 places"):
        program.lower(spec, spec)


def test_lowerings_without_jax_accl_calls_are_still_shared(mesh):
    def plain(v):
        return jnp.sin(v) * 2

    helper = jax.jit(plain)
    program = jax.jit(lambda a, b: (helper(a), helper(b)))
    text = program.lower(jnp.ones(4), jnp.ones(4)).as_text()
    assert len(re.findall(r"func\.func private @plain", text)) == 1, text


def test_helpers_used_twice_run_exact_on_8_devices(mesh):
    # 100 launches each of the jitted and the checkpointed helper of each op (psum,
    # all_to_all, ragged_all_to_all), with and without a delay before one use on one
    # device: every result exact (int32; against the sums, jax.lax.all_to_all, the
    # NumPy reference of ragged_all_to_all).
    assert reuse_worker.check_helpers(mesh, 100) == reuse_worker.checked_keys(100)


def test_checkpointed_fsdp_blocks_match_jax_lax_on_8_devices(mesh):
    result = reuse_worker.check_fsdp(mesh, 5)
    assert result["calls"]["accl_all_gather"] >= 4, result
