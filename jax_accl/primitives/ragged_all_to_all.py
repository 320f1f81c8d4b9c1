"""The ``accl_ragged_all_to_all`` primitive, jax.lax.ragged_all_to_all's semantics:
slice i of each rank's operand (rows ``input_offsets[i]`` to ``+ send_sizes[i]``) goes
to rank ``i // (K / n)`` and is written at its row ``output_offsets[i]`` of that rank's
``output``, which keeps its other rows; ``recv_sizes`` are what each rank expects from
each slice of its peers. The result has the output's type (as jax.lax's).

Linear in (operand, output); its transpose, as JAX defines it, a ragged all-to-all of
the cotangent back (offsets exchanged by jax_accl's all_to_all) and the cotangent with
the received rows zeroed. Over a vmapped axis that it does not name, the batch merges
into the rows (offsets shifted per instance) and ``instances`` counts the calls merged:
the native call checks each slice against its own instance's rows, as unbatched. The
lowering builds the layout table the native call reads
(xla_ffi/algorithms/ragged_all_to_all.h) and emits ``accl_ragged_all_to_all`` with the
result aliasing the output (jax_accl/primitives/lowering.py)."""

from __future__ import annotations

from functools import partial

import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_accl import _compat as c
from jax_accl.primitives import all_to_all
from jax_accl.primitives.allreduce import SUPPORTED_DTYPES, next_op_id

accl_ragged_all_to_all_p = c.core.Primitive("accl_ragged_all_to_all")
# The native call on (operand, output, layout table), inside the lowering.
accl_ragged_call_p = c.core.Primitive("accl_ragged_all_to_all_call")
accl_ragged_call_p.def_abstract_eval(lambda operand, output, table, **params: output)

API = "jax_accl.ragged_all_to_all"


def bind(
    operand, output, sizes, *, axes: tuple, axis_index_groups, axis_size: int, instances: int = 1
):
    """`sizes`: (input_offsets, send_sizes, output_offsets, recv_sizes); `instances`: the
    vmapped calls merged into this one (the batch rule's)."""
    return accl_ragged_all_to_all_p.bind(
        operand,
        output,
        *sizes,
        axes=axes,
        axis_index_groups=axis_index_groups,
        axis_size=axis_size,
        instances=instances,
        op_id=next_op_id(),
    )


INT32_MAX = np.iinfo(np.int32).max


def layout_table(operand_shape, output_shape, sizes, instances: int):
    """The native call's table (int32): [row elements, operand rows, output rows, K,
    instances, 0, 0, 0], then the four arrays (8 + 4K words: a multiple of 16 bytes;
    xla_ffi/algorithms/ragged_all_to_all.h). An offset or size outside int32 (int64
    arrays under x64) becomes -1, which the native checks refuse naming the slice,
    instead of wrapping around to another row."""
    row = int(np.prod(operand_shape[1:], dtype=np.int64))
    k = sizes[0].shape[0]
    header = jnp.asarray([row, operand_shape[0], output_shape[0], k, instances, 0, 0, 0], jnp.int32)
    parts = [header]
    for s in sizes:
        s = jnp.asarray(s)
        if np.dtype(s.dtype).itemsize > 4 or np.dtype(s.dtype) == np.uint32:
            s = jnp.where((s < 0) | (s > INT32_MAX), -1, s)
        parts.append(s.astype(jnp.int32))
    return jnp.concatenate(parts)


def _abstract_eval(operand, output, *sizes, axes, axis_index_groups, axis_size, instances, op_id):
    c.check_axis_names(axes, "ragged_all_to_all")
    dtype = np.dtype(operand.dtype)
    if dtype not in SUPPORTED_DTYPES or np.dtype(output.dtype) != dtype:
        raise TypeError(
            f"{API}: the operand and the output must have one supported dtype, got "
            f"{operand.dtype} and {output.dtype}"
        )
    if operand.ndim == 0 or operand.shape[1:] != output.shape[1:]:
        raise ValueError(
            f"{API}: the operand {operand.shape} and the output {output.shape} must have "
            "rows of one shape"
        )
    row = int(np.prod(operand.shape[1:], dtype=np.int64))
    if max(row, operand.shape[0], output.shape[0], row * max(operand.shape[0], 1)) > INT32_MAX:
        raise ValueError(
            f"{API}: the operand {operand.shape} and the output {output.shape} must have "
            f"at most {INT32_MAX} rows and elements"
        )
    names = ("input_offsets", "send_sizes", "output_offsets", "recv_sizes")
    for name, s in zip(names, sizes):
        if not np.issubdtype(np.dtype(s.dtype), np.integer) or s.ndim != 1 or s.shape[0] < 1:
            raise ValueError(f"{API}: {name} must be a non-empty 1-D integer array, got {s}")
    k = sizes[0].shape[0]
    if any(s.shape[0] != k for s in sizes) or k % axis_size:
        raise ValueError(
            f"{API}: the offsets and sizes must have one length, a multiple of the size of "
            f"{axes} ({axis_size}); got {[s.shape[0] for s in sizes]}"
        )
    return output.update(weak_type=False), {c.core.NamedAxisEffect(a) for a in axes}


def _jvp(primals, tangents, **params):
    operand, output, *sizes = primals
    d_operand, d_output, *_ = tangents
    params.pop("op_id")
    out = bind(operand, output, sizes, **params)
    if type(d_operand) is type(d_output) is c.ad.Zero:
        return out, c.ad.Zero(c.core.typeof(out).to_tangent_aval())
    d_operand, d_output = c.ad.instantiate_zeros(d_operand), c.ad.instantiate_zeros(d_output)
    return out, bind(d_operand, d_output, sizes, **params)


def _transpose(t, operand, output, *sizes, axes, axis_index_groups, axis_size, instances, op_id):
    undefined = c.ad.is_undefined_primal
    if type(t) is c.ad.Zero:
        zeros = [c.ad.Zero(x.aval) if undefined(x) else None for x in (operand, output)]
        return [*zeros, None, None, None, None]
    input_offsets, send_sizes, output_offsets, recv_sizes = sizes
    params = dict(axes=axes, axis_index_groups=axis_index_groups, axis_size=axis_size)

    def exchanged(offsets):  # each slice's offset as its receiver (sender) sees it
        blocks = c.insert_collective_pvary(axes, offsets).reshape(axis_size, -1)
        return all_to_all.bind([blocks], **params)[0].reshape(-1)

    received_at = exchanged(output_offsets)
    zero = c.ad.zeros_like_aval(operand.aval)  # (of the operand's type: varying or not)
    back = (received_at, recv_sizes, exchanged(input_offsets), send_sizes)
    operand_t = bind(t, zero, back, **params, instances=instances)
    # The output's cotangent: t, except on the rows the call overwrote.
    edges = jnp.zeros(t.shape[0] + 1, jnp.int32).at[received_at].add(1)
    edges = edges.at[received_at + recv_sizes].add(-1)
    written = jnp.cumsum(edges[:-1]) > 0
    output_t = jnp.where(written.reshape((-1,) + (1,) * (t.ndim - 1)), jnp.zeros_like(t), t)
    return [
        operand_t if undefined(operand) else None,
        output_t if undefined(output) else None,
        None,
        None,
        None,
        None,
    ]


def _batcher(axis_data, vals_in, dims_in, *, axes, axis_index_groups, axis_size, instances, op_id):
    params = dict(axes=axes, axis_index_groups=axis_index_groups, axis_size=axis_size)
    if axis_data.name in axes or axis_index_groups is not None:
        raise NotImplementedError(
            f"{API} over a vmapped axis it names, or with axis_index_groups under vmap (as jax.lax)"
        )
    if all(d is None for d in dims_in):
        return bind(vals_in[0], vals_in[1], vals_in[2:], **params, instances=instances), None
    b = axis_data.size

    def front(x, d):  # the batch dimension first
        return lax.broadcast(x, (b,)) if d is None else jnp.moveaxis(x, d, 0)

    operand, output = (front(x, d) for x, d in zip(vals_in[:2], dims_in[:2]))
    sizes = [front(x, d) for x, d in zip(vals_in[2:], dims_in[2:])]  # (b, K)
    # Instance j's rows follow instance j - 1's: its offsets shift by j rows' worth.
    shift_in = (jnp.arange(b) * operand.shape[1])[:, None]
    shift_out = (jnp.arange(b) * output.shape[1])[:, None]
    sizes[0] = sizes[0] + shift_in.astype(sizes[0].dtype)
    sizes[2] = sizes[2] + shift_out.astype(sizes[2].dtype)
    # Each instance's slices for one peer stay together: (b, n, K/n) -> (n, b, K/n).
    n = axis_size
    merged = [s.reshape(b, n, -1).swapaxes(0, 1).reshape(-1) for s in sizes]
    # The native call checks each instance's slices against its own rows (never the
    # merged rows, where a slice past one instance's would reach the next one's).
    out = bind(
        operand.reshape(-1, *operand.shape[2:]),
        output.reshape(-1, *output.shape[2:]),
        merged,
        **params,
        instances=b * instances,
    )
    return out.reshape(b, -1, *out.shape[1:]), 0


accl_ragged_all_to_all_p.def_impl(partial(c.dispatch.apply_primitive, accl_ragged_all_to_all_p))
accl_ragged_all_to_all_p.def_effectful_abstract_eval(_abstract_eval)
c.batching.fancy_primitive_batchers[accl_ragged_all_to_all_p] = _batcher
c.ad.primitive_jvps[accl_ragged_all_to_all_p] = _jvp
c.ad.primitive_transposes[accl_ragged_all_to_all_p] = _transpose
