"""bfloat16 on the wire: a float32 sum whose bytes travel as bfloat16 (Horovod's
``Compression.fp16``, with bfloat16's range), opted into by ``wire_dtype=jnp.bfloat16``
on ``psum``/``pmean``/``allreduce`` or by ``JAX_ACCL_WIRE_DTYPE=bfloat16``.

Where the values are rounded (every algorithm and tier; docs/api.md, "bfloat16 on the
wire"): the float32 bucket's call (``accl_allreduce_bf16_wire``) runs on the float32
buffers, and the algorithm's own passes do the rounding (xla_ffi/transport/wire_link.h):
each rank's operand is rounded once to bfloat16 (to nearest even) where it is first read,
every message carries bfloat16, every reduction step adds in float32 and rounds the sum
to bfloat16, and the one bfloat16 result reaches every rank widened to float32, exactly,
as it is written. So every rank holds the same bits, as with any jax_accl all-reduce.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from jax_accl import config

BFLOAT16 = np.dtype(jnp.bfloat16)
# Leaves whose sum can travel as bfloat16: float32 halves its bytes; bfloat16 travels
# as itself. The knob changes only float32 leaves.
COMPRESSED = (np.dtype(np.float32),)


def resolve(wire_dtype, op: str, api_name: str):
    """The wire dtype of a call that asked for `wire_dtype`, checked: bfloat16 or None
    (None asked: JAX_ACCL_WIRE_DTYPE's, for sums; other reductions stay exact)."""
    if wire_dtype is None:
        knob = config.value("JAX_ACCL_WIRE_DTYPE") == "bfloat16"
        return BFLOAT16 if knob and op == "sum" else None
    try:
        wanted = np.dtype(wire_dtype)
    except TypeError:
        wanted = None
    if wanted != BFLOAT16:
        raise ValueError(
            f"jax_accl.{api_name}: wire_dtype must be jnp.bfloat16 (or None: "
            f"JAX_ACCL_WIRE_DTYPE's), got {wire_dtype!r}"
        )
    if op != "sum":
        raise ValueError(
            f"jax_accl.{api_name}: wire_dtype applies to sums (psum, pmean, allreduce with "
            f'op="sum"), not op={op!r}: a {op} of rounded values is not what was asked'
        )
    return BFLOAT16


def check_leaves(leaves, api_name: str) -> None:
    """An explicit wire_dtype takes float32 (compressed) and bfloat16 (as is) leaves only."""
    for k, leaf in enumerate(leaves):
        dtype = np.dtype(jnp.result_type(leaf))
        if dtype not in COMPRESSED and dtype != BFLOAT16:
            raise TypeError(
                f"jax_accl.{api_name}: wire_dtype=bfloat16 is for float32 values (bfloat16 "
                f"ones travel as they are), but leaf {k} is {dtype}: "
                + _why_not(dtype)
                + "; reduce it without wire_dtype"
            )


def _why_not(dtype: np.dtype) -> str:
    if dtype.kind in "iub":
        return "an integer or boolean sum must stay exact"
    if dtype == np.float16:
        return "float16 has as few bytes as bfloat16 and a finer mantissa"
    return f"only float32 is compressed ({dtype} keeps its precision)"


def compressed(dtype) -> bool:
    """Whether a bucket of this dtype travels as bfloat16 where the wire dtype is asked."""
    return np.dtype(dtype) in COMPRESSED
