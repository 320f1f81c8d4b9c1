"""jax_accl.ragged_all_to_all against the semantics of jax.lax.ragged_all_to_all's
docstring (a NumPy reference: XLA:CPU cannot run jax.lax's), in one process of 8 CPU
devices: random layouts with empty slices and several slices per peer, every dtype
(bitwise), the routed jax.lax call, the transpose (the adjoint identity), vmap, errors
that name the rank and the slice, and the compiled HLO (jax_accl's call, no XLA one)."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from accl_testing import P, put

import jax_accl
from jax_accl.testing import ragged

N_DEV = 8


def layout(seed, per_peer):
    return ragged.layout(N_DEV, seed, per_peer)


def reference(operand, output, *sizes_and_per_peer):
    return ragged.reference(operand, output, *sizes_and_per_peer[:4])


def program(mesh, lib_call, shard_map=jax.shard_map):
    def body(operand, output, *sizes):
        return lib_call(operand[0], output[0], *(s[0] for s in sizes))[None]

    return jax.jit(shard_map(body, mesh=mesh, in_specs=(P("i"),) * 6, out_specs=P("i")))


def ours(operand, output, *sizes):
    return jax_accl.ragged_all_to_all(operand, output, *sizes, axis_name="i")


def placed(mesh, *arrays):
    return [put(mesh, jnp.asarray(a), P("i")) for a in arrays]


@pytest.mark.parametrize("dtype", ["int32", "float32", "bfloat16", "int8", "bool", "complex64"])
@pytest.mark.parametrize("seed,per_peer", [(0, 1), (1, 2), (2, 3)])
def test_random_layouts_match_the_semantics_bitwise(mesh8, seed, per_peer, dtype):
    sizes = layout(seed, per_peer)
    rng = np.random.default_rng(seed + 100)
    operand = (rng.integers(-50, 50, size=(N_DEV, 24, 3)) % 7).astype(dtype)
    output = np.full((N_DEV, 30, 3), 1).astype(dtype)
    fn = program(mesh8, ours)
    args = placed(mesh8, operand, output, *sizes)
    got = np.asarray(fn(*args))
    want = reference(operand, output, *sizes, per_peer)
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    text = fn.lower(*args).compile().as_text()
    assert "ragged-all-to-all" not in text
    assert text.count('custom_call_target="accl_ragged_all_to_all"') == 1


def test_rows_too_large_to_stage_are_read_in_place(mesh8):
    """96 KiB per device: above what a call stages (64 KiB), so each rank reads its
    peers' operands in place and the ranks meet at the closing barrier."""
    sizes = layout(11, 2)
    operand = np.arange(N_DEV * 24 * 1024, dtype=np.float32).reshape(N_DEV, 24, 1024)
    output = np.full((N_DEV, 30, 1024), 7, np.float32)
    got = np.asarray(program(mesh8, ours)(*placed(mesh8, operand, output, *sizes)))
    np.testing.assert_array_equal(got, reference(operand, output, *sizes))


def ours_on(axis):
    return lambda operand, output, *sizes: jax_accl.ragged_all_to_all(
        operand, output, *sizes, axis_name=axis
    )


def test_a_shard_map_manual_over_some_axes():
    """Manual over "y" only: each device's call on its own shard."""
    mesh = jax.make_mesh((2, 4), ("x", "y"))
    n = 4
    sizes = ragged.layout(n, 12, 1)
    operand = np.arange(n * 24 * 2, dtype=np.int32).reshape(n, 24, 2)
    output = np.zeros((n, 30, 2), np.int32)

    def body(operand, output, *sizes):
        return ours_on("y")(operand[0], output[0], *(s[0] for s in sizes))[None]

    fn = jax.jit(
        jax.shard_map(body, mesh=mesh, in_specs=(P("y"),) * 6, out_specs=P("y"), axis_names={"y"})
    )
    args = [put(mesh, jnp.asarray(a), P("y")) for a in (operand, output, *sizes)]
    np.testing.assert_array_equal(np.asarray(fn(*args)), ragged.reference(operand, output, *sizes))
    assert 'custom_call_target="accl_ragged_all_to_all"' in fn.lower(*args).compile().as_text()


def test_offsets_outside_int32_are_refused_not_wrapped(mesh8):
    """With x64, an int64 offset past 2**31 is an error naming the slice (not row 3)."""
    in_off, send, out_off, recv = layout(3, 1)
    with jax.enable_x64(True):
        far = in_off.astype(np.int64)
        far[2, 5] += 2**32
        with pytest.raises(Exception, match="rank 2 sends slice 5"):
            run_with(mesh8, (far, send, out_off, recv))


def test_routing_carries_jax_lax_ragged_all_to_all(mesh8):
    sizes = layout(5, 2)
    operand = np.arange(N_DEV * 24 * 2, dtype=np.float32).reshape(N_DEV, 24, 2)
    output = np.zeros((N_DEV, 30, 2), np.float32)

    def theirs(operand, output, *sizes):
        return jax.lax.ragged_all_to_all(operand, output, *sizes, axis_name="i")

    fn = program(mesh8, theirs, shard_map=jax_accl.shard_map)
    args = placed(mesh8, operand, output, *sizes)
    np.testing.assert_array_equal(np.asarray(fn(*args)), reference(operand, output, *sizes, 2))
    assert 'custom_call_target="accl_ragged_all_to_all"' in fn.lower(*args).compile().as_text()


def test_the_transpose_is_the_adjoint(mesh8):
    """<A(x, o), y> = <x, A^T_x(y)> + <o, A^T_o(y)> for the linear map (operand,
    output) -> result, with the transpose JAX defines: checked with random x, o, y."""
    sizes = layout(7, 2)
    rng = np.random.default_rng(8)
    x, o, y = (
        rng.standard_normal(shape).astype(np.float32)
        for shape in [(8, 24, 2), (8, 30, 2), (8, 30, 2)]
    )

    def body(x, o, y, *sizes):
        sizes = [s[0] for s in sizes]
        result, vjp = jax.vjp(lambda a, b: ours(a, b, *sizes), x[0], o[0])
        x_t, o_t = vjp(y[0])
        forward = jnp.sum(result * y[0])
        backward = jnp.sum(x[0] * x_t) + jnp.sum(o[0] * o_t)
        return jnp.stack([forward, backward])[None]

    fn = jax.jit(
        jax.shard_map(body, mesh=mesh8, in_specs=(P("i"),) * 7, out_specs=P("i"), check_vma=False)
    )
    args = placed(mesh8, x, o, y, *sizes)
    sums = np.asarray(fn(*args)).sum(axis=0)
    np.testing.assert_allclose(sums[0], sums[1], rtol=1e-5)
    text = fn.lower(*args).compile().as_text()
    assert text.count('custom_call_target="accl_ragged_all_to_all"') == 2  # and its transpose
    assert "all-to-all(" not in text


def test_vmap_over_an_axis_it_does_not_name(mesh8):
    batch = [layout(20 + j, 1) for j in range(3)]
    operand = np.arange(3 * N_DEV * 24, dtype=np.int32).reshape(3, N_DEV, 24, 1)
    output = -np.ones((3, N_DEV, 30, 1), np.int32)
    stacked = [np.stack([b[m] for b in batch]) for m in range(4)]  # (3, N_DEV, K)

    def body(operand, output, *sizes):
        call = jax.vmap(lambda *a: ours(*a))
        return call(operand[:, 0], output[:, 0], *(s[:, 0] for s in sizes))[:, None]

    spec = P(None, "i")
    fn = jax.jit(jax.shard_map(body, mesh=mesh8, in_specs=(spec,) * 6, out_specs=spec))
    got = np.asarray(fn(*[put(mesh8, jnp.asarray(a), spec) for a in (operand, output, *stacked)]))
    for j in range(3):
        want = reference(operand[j], output[j], *batch[j], 1)
        np.testing.assert_array_equal(got[j], want)


def run_vmapped(mesh8, batch, rows=24, out_rows=30):
    """jax.vmap of the call over len(batch) instances, each its own layout."""
    operand = np.arange(len(batch) * N_DEV * rows, dtype=np.int32).reshape(-1, N_DEV, rows, 1)
    output = -np.ones((len(batch), N_DEV, out_rows, 1), np.int32)
    stacked = [np.stack([b[m] for b in batch]) for m in range(4)]  # (instances, N_DEV, K)

    def body(operand, output, *sizes):
        call = jax.vmap(lambda *a: ours(*a))
        return call(operand[:, 0], output[:, 0], *(s[:, 0] for s in sizes))[:, None]

    spec = P(None, "i")
    fn = jax.jit(jax.shard_map(body, mesh=mesh8, in_specs=(spec,) * 6, out_specs=spec))
    arrays = (operand, output, *stacked)
    return np.asarray(fn(*[put(mesh8, jnp.asarray(a), spec) for a in arrays]))


# Each: the instance, the slice it breaks (rank, slice, offset, size) and the error.
PAST_AN_INSTANCES_ROWS = {
    "read": (
        1,
        (5, 2, "in", 23, 4),
        "vmap instance 1: rank 5 sends slice 2 (rows 23 to 27) outside its operand of 24 rows",
    ),
    "write": (
        0,
        (1, 4, "out", 29, 2),
        "vmap instance 0: rank 1 writes rows 29 to 31 of rank 4's output of 30 rows "
        "(its output_offsets[4])",
    ),
}


@pytest.mark.parametrize("case", sorted(PAST_AN_INSTANCES_ROWS))
def test_vmap_checks_each_instances_slices_against_its_own_rows(mesh8, case):
    """Issue 59: the batch rule merges the instances' rows, so a slice past one
    instance's rows lay inside the merged operand (output) and read (wrote) the next
    instance's rows silently. Each instance's slices are checked against its own rows,
    as unbatched, the error naming the instance."""
    instance, (rank, i, side, offset, size), named = PAST_AN_INSTANCES_ROWS[case]
    batch = [[a.copy() for a in layout(30 + j, 1)] for j in range(3)]
    in_off, send, out_off, recv = batch[instance]
    (in_off if side == "in" else out_off)[rank, i] = offset
    send[rank, i] = recv[i, rank] = size
    with pytest.raises(Exception, match=re.escape(named)):
        run_vmapped(mesh8, batch)


def run_with(mesh8, sizes, rows=24, out_rows=30):
    operand = np.zeros((N_DEV, rows, 2), np.float32)
    output = np.zeros((N_DEV, out_rows, 2), np.float32)
    return np.asarray(program(mesh8, ours)(*placed(mesh8, operand, output, *sizes)))


def test_a_slice_outside_the_operand_names_the_rank_and_the_slice(mesh8):
    in_off, send, out_off, recv = (a.copy() for a in layout(3, 1))
    in_off[5, 2] = 23
    send[5, 2] = 4  # rows 23 to 27 of 24
    recv[2, 5] = 4
    named = "rank 5 sends slice 2 (rows 23 to 27) outside its operand of 24 rows"
    with pytest.raises(Exception, match=re.escape(named)):
        run_with(mesh8, (in_off, send, out_off, recv))


def test_sizes_the_receiver_does_not_expect_are_an_error(mesh8):
    in_off, send, out_off, recv = (a.copy() for a in layout(4, 1))
    recv[3, 6] += 1  # rank 3 expects one row more from rank 6 (its slice 3) than it sends
    named = (
        f"rank 6 sends {send[6, 3]} rows to rank 3 (its slice 3), which expects "
        f"{send[6, 3] + 1} (its recv_sizes[6]): send_sizes and the receivers' recv_sizes differ"
    )
    with pytest.raises(Exception, match=re.escape(named)):
        run_with(mesh8, (in_off, send, out_off, recv))


def test_a_write_past_the_receivers_output_is_an_error(mesh8):
    in_off, send, out_off, recv = (a.copy() for a in layout(6, 1))
    out_off[1, 4] = 29
    send[1, 4] = recv[4, 1] = 2  # rows 29 to 31 of 30
    named = "rank 1 writes rows 29 to 31 of rank 4's output of 30 rows (its output_offsets[4])"
    with pytest.raises(Exception, match=re.escape(named)):
        run_with(mesh8, (in_off, send, out_off, recv))


def test_bad_shapes_are_refused_when_traced(mesh8):
    sizes = layout(0, 1)
    with pytest.raises(ValueError, match="must have one length, a multiple of the size"):
        run_with(mesh8, (sizes[0][:, :7], sizes[1][:, :7], sizes[2][:, :7], sizes[3][:, :7]))
    with pytest.raises(ValueError, match="rows of one shape"):
        operand = np.zeros((N_DEV, 24, 2), np.float32)
        output = np.zeros((N_DEV, 30, 3), np.float32)
        program(mesh8, ours)(*placed(mesh8, operand, output, *sizes))
