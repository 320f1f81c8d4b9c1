"""No two jax_accl calls of a program share a lane (jax_accl/primitives/lanes.py): a
helper holding a call (a psum, an all_to_all, a ragged_all_to_all) that JAX would
lower once and call from each use (a nested jax.jit, jax.checkpoint) is lowered once
per use, each call with its own lane, proved in the compiled HLO; a program whose
calls could not be told apart is refused at lowering, naming the helper; lowerings
without jax_accl calls are still cached. Calls inside jax.experimental.custom_partitioning
rules (lowered as modules of their own when XLA partitions the program) have lanes of
their own too; a compiled program in which two calls carry one lane is refused at
compilation, naming them. The programs also run exact on this process's 8 devices (the
multi-process runs, where shared lanes give wrong results:
tests/multiprocess/test_reused_helpers.py, test_custom_partitioning.py)."""

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
from jax_accl.testing import partition_worker, reuse_worker


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
        use = [(8, 1 << 16) if op in ("psum", "broadcast") else (8 * 32, 256)]
    return [_spec(mesh, shape) for shape in use * 2]


XLA_OPS = {
    "psum": "all-reduce(",
    "all_to_all": "all-to-all(",
    "ragged": "ragged-all-to-all(",
    "broadcast": "all-reduce(",  # (what a masked psum, jax.lax's way, would leave)
}
TARGETS = {
    "psum": "accl_allreduce",
    "all_to_all": "accl_all_to_all",
    "ragged": "accl_ragged_all_to_all",
    "broadcast": "accl_broadcast",
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


def _partition_program_text(mesh) -> str:
    """The compiled HLO of partition_worker's program: four jax_accl calls inside
    custom_partitioning rules (one rule used for two of them)."""
    program = partition_worker.program(mesh, 0.0)
    return program.lower(*[_spec(mesh, (8, 1024))] * 4).compile().as_text()


def test_calls_in_custom_partitioning_rules_have_a_lane_each_in_the_compiled_program(mesh):
    keys = _call_keys(_partition_program_text(mesh))
    lanes_of_calls = [lane for _, _, lane in keys]
    # Before the fix the four calls carried one lane (each rule's module counted from 0).
    assert len(keys) == 4 and len(set(lanes_of_calls)) == 4, keys
    assert partition_worker.check(mesh, 5, 0.003) == 5  # and exact, on 8 devices


def test_a_compiled_program_whose_rules_share_a_lane_is_refused_naming_the_calls(mesh, monkeypatch):
    # Without their sites, the rules' modules give their calls the lanes of before the
    # fix: the check on the compiled program must refuse it, naming the calls (the
    # program taken to span processes, where a shared lane pairs wrong calls).
    monkeypatch.setattr(lanes, "_take_pending_site", lambda: None)
    monkeypatch.setattr(lanes, "spans_processes", lambda devices: True)
    with pytest.raises(AcclError) as refused:
        _partition_program_text(mesh)
    lanes._lowered.pending_site = None  # the last rule's, never taken
    message = str(refused.value)
    assert "carry one lane" in message, message
    assert message.count("jax_accl.psum over ('x',)") == 2, message
    assert "custom_partitioning" in message, message


def test_a_compiled_program_with_a_lane_forced_on_two_calls_is_refused(mesh, monkeypatch):
    # Two plain calls of a shard_map, every lane forced to one value: their op ids
    # differ, so the lowered module's check lets them by; the compiled program's refuses
    # where the program spans processes, and runs it exact in one process, where each
    # call has a group of its own.
    monkeypatch.setattr(lanes, "next_lane", lambda scratch, groups: 12345)

    def body(a, b):
        return jax_accl.psum(a, "x"), jax_accl.pmax(b, "x")

    program = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("x"),) * 2, out_specs=(P(),) * 2))
    spec = _spec(mesh, (8, 4))
    lowered = program.lower(spec, spec)  # the lowering is let by
    x = np.arange(32, dtype=np.int32).reshape(8, 4)
    a = jax.device_put(x, NamedSharding(mesh, P("x")))
    summed, largest = lowered.compile()(a, a)  # one process: run, exact
    np.testing.assert_array_equal(np.asarray(summed), x.sum(0, keepdims=True))
    np.testing.assert_array_equal(np.asarray(largest), x.max(0, keepdims=True))
    monkeypatch.setattr(lanes, "spans_processes", lambda devices: True)
    again = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("x"),) * 2, out_specs=(P(),) * 2))
    with pytest.raises(AcclError, match="carry one lane") as refused:
        again.lower(spec, spec).compile()
    for named in ("jax_accl.psum over ('x',)", "jax_accl.pmax over ('x',)", "(12345)"):
        assert named in str(refused.value), refused.value
