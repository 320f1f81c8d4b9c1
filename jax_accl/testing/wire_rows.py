"""Inputs and the NumPy model of bfloat16 on the wire (jax_accl/wire_dtype.py), shared by
the in-process and multi-process tests."""

from __future__ import annotations

import ml_dtypes
import numpy as np

# float32 values at and near bfloat16 ties (7 stored mantissa bits): 1 + 2^-8 lies halfway
# between 1 and 1 + 2^-7 and rounds to the even 1; 1 + 3 * 2^-8 rounds up to the even
# 1 + 2^-6; a value just above a tie rounds up (truncation would not); and negatives.
TIES = np.array(
    [1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, -(1 + 2**-8), -(1 + 3 * 2**-8), 3 * 2**-9],
    np.float32,
)


def rows(n: int, count: int) -> np.ndarray:
    """n rows of `count` float32 values, row r made from r: noise of mixed scales,
    starting with TIES scaled by 2^r (ties stay ties)."""
    out = np.empty((n, count), np.float32)
    for r in range(n):
        rng = np.random.default_rng(1000 + r)
        out[r] = rng.standard_normal(count) * np.exp2(rng.integers(-6, 6, count))
        head = min(count, TIES.size)
        out[r, :head] = TIES[:head] * np.float32(2.0**r)
    return out


def to_wire(values: np.ndarray) -> np.ndarray:
    """float32 rounded to bfloat16, to nearest even (ml_dtypes, as XLA's conversion)."""
    return np.asarray(values, np.float32).astype(ml_dtypes.bfloat16)


def rank_order_sum(table: np.ndarray) -> np.ndarray:
    """The sum as the rank-order folds compute it (direct, reduce_broadcast): each row
    rounded once to bfloat16, then ((b0 + b1) + b2) + ..., every addition in float32
    rounded to bfloat16; the float32 result every rank holds."""
    wire = to_wire(table)
    acc = wire[0]
    for row in wire[1:]:
        acc = (acc.astype(np.float32) + row.astype(np.float32)).astype(ml_dtypes.bfloat16)
    return acc.astype(np.float32)
