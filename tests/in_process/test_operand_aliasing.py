"""In place only where the operand may be overwritten (jax_accl/primitives/operand_origin.py):
a jax_accl all-reduce, broadcast or reduce of an argument the program must keep reads it
where it lies and writes XLA's fresh result (no copy of the argument before the call, the
argument unchanged after it); of a donated argument, an intermediate or a loop's carried
value it works in place. Results equal jax.lax's bitwise on integers either way."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from accl_testing import P, put, values

import jax_accl

ALIAS = "output_operand_aliases"


def program(mesh, body, n_args=1, donate=()):
    return jax.jit(
        jax.shard_map(
            body, mesh=mesh, in_specs=(P("i"),) * n_args, out_specs=P("i"), check_vma=False
        ),
        donate_argnums=donate,
    )


def compiled_text(fn, *args) -> str:
    return fn.lower(*args).compile().as_text()


def accl_lines(text: str) -> list:
    return [line for line in text.splitlines() if 'custom_call_target="accl_' in line]


def lax_psum(x):
    """jax.lax.psum over "i" of a (devices, ...) array, each device's row the sum."""
    return np.broadcast_to(x.sum(0, dtype=x.dtype), x.shape)


@pytest.mark.parametrize("shape", [(8, 5), (8, 1 << 20)])  # 4 MiB per device: reduce_broadcast
def test_kept_argument_is_read_where_it_lies(mesh8, shape):
    x = values(shape, "int32", seed=1)
    xs = put(mesh8, x, P("i"))
    fn = program(mesh8, lambda a: jax_accl.psum(a, "i"))
    assert ALIAS not in fn.lower(xs).as_text()
    text = compiled_text(fn, xs)
    assert "copy(" not in text, text
    (line,) = accl_lines(text)
    assert "output_to_operand_aliasing" not in line
    np.testing.assert_array_equal(np.asarray(fn(xs)), lax_psum(x))
    np.testing.assert_array_equal(np.asarray(xs), x)  # the argument is untouched
    np.testing.assert_array_equal(np.asarray(fn(xs)), lax_psum(x))  # and reads the same again


def test_donated_argument_is_overwritten_in_place(mesh8):
    x = values((8, 1 << 20), "int32", seed=2)
    fn = program(mesh8, lambda a: jax_accl.psum(a, "i"), donate=(0,))
    text = compiled_text(fn, put(mesh8, x, P("i")))
    assert "copy(" not in text
    (line,) = accl_lines(text)
    assert "output_to_operand_aliasing" in line
    np.testing.assert_array_equal(np.asarray(fn(put(mesh8, x, P("i")))), lax_psum(x))


def test_intermediate_stays_in_place_beside_a_kept_argument(mesh8):
    """A fused call of a kept argument and an intermediate (a step's gradient): only the
    intermediate's result aliases its operand."""
    a, b = values((8, 6), "int32", seed=3), values((8, 6), "int32", seed=4)
    fn = program(mesh8, lambda u, v: jax_accl.psum((u, v * 3), "i"), n_args=2)
    args = put(mesh8, a, P("i")), put(mesh8, b, P("i"))
    text = fn.lower(*args).as_text()
    assert text.count("operand_index = 1") == 1 and "operand_index = 0" not in text
    got = fn(*args)
    np.testing.assert_array_equal(np.asarray(got[0]), lax_psum(a))
    np.testing.assert_array_equal(np.asarray(got[1]), lax_psum(b * 3))


def test_loop_carry_stays_in_place(mesh8):
    x = values((8, 7), "int32", seed=5) % 5
    fn = program(mesh8, lambda a: jax.lax.fori_loop(0, 3, lambda _, v: jax_accl.psum(v, "i"), a))
    xs = put(mesh8, x, P("i"))
    (line,) = accl_lines(compiled_text(fn, xs))
    assert "output_to_operand_aliasing" in line
    want = x
    for _ in range(3):
        want = lax_psum(want)
    np.testing.assert_array_equal(np.asarray(fn(xs)), want)


def test_argument_through_a_nested_jit(mesh8):
    """The call in a function JAX lowers apart (a jitted helper), called with the
    program's argument: still a kept argument."""
    x = values((8, 9), "int32", seed=6)
    inner = program(mesh8, lambda a: jax_accl.psum(a, "i"))
    fn = jax.jit(lambda a: inner(a))
    xs = put(mesh8, x, P("i"))
    assert ALIAS not in fn.lower(xs).as_text()
    np.testing.assert_array_equal(np.asarray(fn(xs)), lax_psum(x))
    np.testing.assert_array_equal(np.asarray(xs), x)


@pytest.mark.parametrize("root", [0, 5])
def test_rooted_of_a_kept_argument(mesh8, root):
    x = values((8, 1 << 20), "int32", seed=7)
    xs = put(mesh8, x, P("i"))
    bcast = program(mesh8, lambda a: jax_accl.broadcast(a, "i", root=root))
    red = program(mesh8, lambda a: jax_accl.reduce(a, "i", root=root))
    for fn in (bcast, red):
        assert ALIAS not in fn.lower(xs).as_text()
    np.testing.assert_array_equal(np.asarray(bcast(xs)), np.broadcast_to(x[root], x.shape))
    want = np.zeros_like(x)
    want[root] = x.sum(0, dtype=x.dtype)
    np.testing.assert_array_equal(np.asarray(red(xs)), want)
    np.testing.assert_array_equal(np.asarray(xs), x)


def test_bf16_wire_of_a_kept_argument_matches_in_place(mesh8):
    """bfloat16 on the wire narrows a kept argument straight into the result: the same
    bits as the in-place call on a donated copy of it, the argument untouched."""
    x = values((8, 1 << 20), "float32", seed=8)
    body = lambda a: jax_accl.psum(a, "i", wire_dtype=jnp.bfloat16)  # noqa: E731
    kept, donated = program(mesh8, body), program(mesh8, body, donate=(0,))
    xs = put(mesh8, x, P("i"))
    assert ALIAS not in kept.lower(xs).as_text()
    got = np.asarray(kept(xs))
    np.testing.assert_array_equal(got, np.asarray(donated(put(mesh8, x, P("i")))))
    np.testing.assert_array_equal(np.asarray(xs), x)
    assert (got == got[:1]).all()  # every device the same bits


def _vma_flags(address: int) -> list:
    """The VmFlags of this process's mapping that holds `address` (/proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                lo, hi = (int(v, 16) for v in head.split("-"))
                inside = lo <= address < hi
            elif inside and line.startswith("VmFlags:"):
                return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


def test_fresh_result_is_advised_as_huge_pages(mesh8):
    """A kept argument's 64 MiB all-reduce writes XLA's fresh result, advised as huge
    pages before its first write (common/huge_pages.cc: "hg" in its mapping's flags),
    where the kernel has transparent huge pages."""
    x = np.ones((8, 16 << 20), np.float32)
    xs = put(mesh8, x, P("i"))
    got = program(mesh8, lambda a: jax_accl.psum(a, "i"))(xs)
    shard = got.addressable_shards[0].data
    np.testing.assert_array_equal(np.asarray(shard)[0, :: 1 << 16], 8.0)
    address = shard.unsafe_buffer_pointer() + (32 << 20)  # inside the aligned interior
    thp = os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled")
    assert ("hg" in _vma_flags(address)) == thp


def test_a_pass_that_fails_keeps_the_aliases_and_the_program_lowers(mesh8, monkeypatch, caplog):
    """The pass is a speed-up only: where it cannot read the module (MLIR bindings of a jax
    it does not know), the call keeps its alias (XLA copies the argument), one warning."""
    from jax_accl.primitives import lanes, operand_origin

    def unreadable(module):
        raise AttributeError("no such binding")

    monkeypatch.setattr(operand_origin, "unalias_kept_arguments", unreadable)
    monkeypatch.setattr(lanes._unalias_kept_arguments, "warned", False, raising=False)
    x = values((8, 64), "int32", seed=5)
    xs = put(mesh8, x, P("i"))
    fn = program(mesh8, lambda a: jax_accl.psum(a, "i") + 1)
    with caplog.at_level("WARNING", logger="jax_accl"):
        assert ALIAS in fn.lower(xs).as_text()
    assert "keep their in-place alias" in caplog.text
    np.testing.assert_array_equal(np.asarray(fn(xs)), lax_psum(x) + 1)
    np.testing.assert_array_equal(np.asarray(xs), x)
