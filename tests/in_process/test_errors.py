"""JAX tier: bad input raises a clear Python error of the kind jax.lax raises; a rank
that never arrives makes the others fail within the deadline instead of hanging."""

import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from accl_testing import P, put, values

import jax_accl


def shard(mesh, fn, spec=P("i"), out=P(), check_vma=True):
    return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=spec, out_specs=out, check_vma=check_vma))


def test_unbound_axis_name(mesh8):
    x = put(mesh8, values((8, 2), "float32"), P("i"))
    with pytest.raises(NameError, match="unbound axis name: j"):
        shard(mesh8, lambda a: jax_accl.psum(a, "j"), check_vma=False)(x)
    with pytest.raises(NameError, match="unbound axis name: i") as ours:
        jax.jit(lambda a: jax_accl.psum(a, "i"))(jnp.ones(3))
    with pytest.raises(NameError) as theirs:  # jax.lax's message, word for word
        jax.jit(lambda a: jax.lax.psum(a, "i"))(jnp.ones(3))
    assert str(ours.value).splitlines()[0] == str(theirs.value).splitlines()[0]


@pytest.mark.parametrize(
    "collective",
    [
        lambda a, axis: jax_accl.psum(a, axis),
        lambda a, axis: jax_accl.pmean(a, axis),
        lambda a, axis: jax_accl.all_gather(a, axis),
        lambda a, axis: jax_accl.psum_scatter(a, axis, tiled=True),
        lambda a, axis: jax_accl.ppermute(a, axis, [(0, 1)]),
    ],
    ids=["psum", "pmean", "all_gather", "psum_scatter", "ppermute"],
)
def test_an_unbound_axis_error_lists_the_bound_ones(mesh8, collective, request):
    name = request.node.callspec.id
    x = put(mesh8, values((8, 2), "float32"), P("i"))
    with pytest.raises(NameError) as caught:
        shard(mesh8, lambda a: collective(a, "j"), out=P("i"))(x)
    lines = str(caught.value).splitlines()
    assert "unbound axis name: j" in lines[0]  # jax.lax's line
    assert lines[1].startswith(f"jax_accl.{name}: the axis names bound here are 'i' (")
    with pytest.raises(NameError) as outside:  # no map at all
        jax.jit(lambda a: collective(a, "i"))(jnp.ones(8))
    assert "no axis name is bound here: call it inside jax.shard_map" in str(outside.value)


def test_unsupported_dtype_and_op(mesh8):
    x8 = put(mesh8, jnp.ones((8, 2), jnp.float8_e4m3fn), P("i"))
    with pytest.raises(TypeError, match="does not support dtype float8_e4m3fn"):
        shard(mesh8, lambda a: jax_accl.psum(a, "i"))(x8)
    xc = put(mesh8, jnp.ones((8, 2), jnp.complex64), P("i"))
    with pytest.raises(TypeError, match="max is not defined for complex"):
        shard(mesh8, lambda a: jax_accl.pmax(a, "i"))(xc)
    x = put(mesh8, values((8, 2), "float32"), P("i"))
    with pytest.raises(ValueError, match="op must be one of"):
        shard(mesh8, lambda a: jax_accl.allreduce(a, "i", op="mean"))(x)
    with pytest.raises(ValueError, match="algorithm must be one of"):
        shard(mesh8, lambda a: jax_accl.allreduce(a, "i", algorithm="tree"))(x)


def test_axis_index_groups_under_check_vma_like_psum(mesh8):
    x = put(mesh8, values((8, 2), "float32"), P("i"))
    for lib in (jax.lax, jax_accl):
        with pytest.raises(NotImplementedError):
            shard(
                mesh8, lambda a: lib.psum(a, "i", axis_index_groups=[[0, 1, 2, 3], [4, 5, 6, 7]])
            )(x)


def test_bad_environment_knob(mesh8, monkeypatch):
    monkeypatch.setenv("JAX_ACCL_ALGORITHM", "tree")
    x = put(mesh8, values((8, 2), "float32"), P("i"))
    with pytest.raises(ValueError, match="JAX_ACCL_ALGORITHM"):
        shard(mesh8, lambda a: jax_accl.psum(a, "i"))(x)


def only_device_0_calls(a):
    """A shard_map body in which only device 0 calls the all-reduce: its peers never join."""
    return jax.lax.cond(
        jax.lax.axis_index("i") == 0,
        lambda v: jax_accl.psum(v, "i") + 0 * v,
        lambda v: v,
        a,
    )


# A rank that never arrives: the others end at their deadline, naming the missing, or at
# once by jax_accl.abort() from another thread (the one-shot path, and the rendezvous), or,
# the process idle and XLA:CPU's pool of the size XLA gives it (conftest.py:
# xla_pool_of_xla_size), after about 10 s as a launch XLA:CPU never started on the devices missing
# (xla_ffi/runtime/stall.h; tests/multiprocess/test_async_loop.py: the real one).
STALLED = r"never started this launch \(run id -?\d+\) on devices \[1, 2, 3, 4, 5, 6, 7\]"


@pytest.mark.parametrize(
    "ended_by,size,error,seconds",
    [
        ("timeout", 4, r"timed out waiting for ranks \[1, 2, 3, 4, 5, 6, 7\]", 30),
        ("stall", 4, STALLED, 25),
        ("stall", 1 << 18, STALLED, 25),
        ("abort", 64, r"aborted by jax_accl\.abort\(\) while waiting for ranks", 5),
        ("abort", 1 << 18, r"aborted by jax_accl\.abort\(\) while waiting for ranks", 5),
    ],
)
def test_a_call_whose_peers_never_arrive_ends(
    mesh8, monkeypatch, request, ended_by, size, error, seconds
):
    monkeypatch.setenv("JAX_ACCL_TIMEOUT_S", "1" if ended_by == "timeout" else "60")
    if ended_by == "stall":
        request.getfixturevalue("xla_pool_of_xla_size")
    x = put(mesh8, values((8, size), "float32"), P("i"))
    # Compiled first: the abort must find the call waiting, however slow the compile.
    call = shard(mesh8, only_device_0_calls, out=P("i"), check_vma=False).lower(x).compile()
    if ended_by == "abort":
        threading.Timer(0.5, jax_accl.abort).start()
    start = time.monotonic()
    with pytest.raises(Exception, match=error) as ended:
        jax.block_until_ready(call(x))
    assert time.monotonic() - start < seconds
    # One numbering: no per-launch "call 0" (the call is its launch's only one).
    assert " call 0" not in str(ended.value), ended.value
    # The runtime is usable afterwards.
    y = shard(mesh8, lambda a: jax_accl.psum(a, "i"))(x)
    np.testing.assert_allclose(np.asarray(y)[0], np.asarray(x).sum(0), rtol=1e-5, atol=1e-5)


def test_the_stall_detection_can_be_turned_off(mesh8, monkeypatch):
    """JAX_ACCL_STALL_S=0 (applied at import; set here as import applies it): the devices
    that never call are only late, and the call ends at its deadline, naming them."""
    from jax_accl import _accl, config

    monkeypatch.setenv("JAX_ACCL_TIMEOUT_S", "12")
    x = put(mesh8, values((8, 4), "float32"), P("i"))
    _accl.set_stall_seconds(0)
    try:
        with pytest.raises(Exception, match=r"timed out waiting for ranks \[1, 2, 3, 4, 5, 6, 7\]"):
            jax.block_until_ready(shard(mesh8, only_device_0_calls, out=P("i"), check_vma=False)(x))
    finally:
        _accl.set_stall_seconds(config.value("JAX_ACCL_STALL_S"))


def test_epoch_announcements_are_signed_with_the_jobs_secret():
    """A recovery's values in jax.distributed's store carry an HMAC under a key derived
    from the job's secret: a forged or moved value is refused."""
    from jax_accl import recovery, signing

    signing.set_secret("the job's secret")
    key = "jax_accl/v1/epoch/00000000000000aa/1/announce/0"
    signed = signing.signed(key, "7 9")
    assert recovery._verified(key, signed) == [7, 9]
    assert recovery._verified(key, signed.replace("7 9", "7 8", 1)) is None  # altered
    assert recovery._verified(key.replace("/0", "/1"), signed) is None  # another process's
    assert recovery._verified(key, "7 9 " + "0" * 64) is None  # made up without the secret
    assert recovery._verified(key, "7 9 ünïcode") is None  # garbage is refused, not raised


def test_recover_in_one_process_has_nothing_to_align():
    assert jax_accl.recover() == {"lanes": 0, "moved": 0}


def _raw_target_call(target, **override):
    """A jax_accl FFI target called directly (jax.ffi.ffi_call, one device, its group
    [0]) with the attributes the lowering gives it, less `override`."""
    from jax_accl.names import ALGORITHM_CODES, COLLECTIVE_CODES, OP_CODES

    attributes = dict(
        groups=np.array([0], np.int64),
        group_size=np.int64(1),
        op=np.int64(OP_CODES["sum"]),
        algorithm=np.int64(ALGORITHM_CODES["auto"]),
        op_id=np.int64(1),
        lane=np.int64(7),
        timeout_ms=np.int64(10_000),
        pipeline_chunks=np.int64(0),
        name=f"raw {target}",
        devices=np.array([jax.devices()[0].id], np.int64),
        processes=np.int64(1),
        collective=np.int64(COLLECTIVE_CODES[target]),
        args=np.array([0] if target == "accl_broadcast" else [], np.int64),
    )
    attributes.update(override)
    x = jnp.arange(4, dtype=jnp.int32)
    call = jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(x.shape, x.dtype), has_side_effect=True)
    return jax.jit(lambda a: call(a, **attributes))(x)


def test_every_target_is_one_handler_told_which_collective_by_its_attribute():
    # Issue 60: every target has the one instantiate handler; its `collective` and `args`
    # attributes say what it is and takes. Valid: a one-device broadcast is the identity,
    # and so is an all-reduce.
    assert (np.asarray(_raw_target_call("accl_broadcast")) == np.arange(4)).all()
    assert (np.asarray(_raw_target_call("accl_allreduce")) == np.arange(4)).all()
    with pytest.raises(Exception, match="raw accl_allreduce names no collective: 99"):
        _raw_target_call("accl_allreduce", collective=np.int64(99))
    with pytest.raises(Exception, match="takes one argument, its root; it has 2"):
        _raw_target_call("accl_broadcast", args=np.array([0, 1], np.int64))
    with pytest.raises(Exception, match="root 3 is outside a group of 1"):
        _raw_target_call("accl_broadcast", args=np.array([3], np.int64))


def test_a_target_whose_collective_attribute_does_not_fit_its_operands_raises():
    # The one instantiate handler trusts no attribute: an N-buffer target told it is the
    # ragged all-to-all (or the bfloat16 wire told it is not a sum all-reduce) raises.
    from jax_accl.names import COLLECTIVE_CODES, OP_CODES

    ragged = np.int64(COLLECTIVE_CODES["accl_ragged_all_to_all"])
    with pytest.raises(Exception, match="is a ragged-all-to-all, which this target's operands"):
        _raw_target_call("accl_allreduce", collective=ragged)
    with pytest.raises(Exception, match="bfloat16 on the wire carries a sum all-reduce"):
        _raw_target_call(
            "accl_allreduce_bf16_wire",
            op=np.int64(OP_CODES["max"]),
            args=np.array([], np.int64),
        )
