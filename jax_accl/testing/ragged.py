"""Random layouts for jax_accl.ragged_all_to_all's tests and the reference of
jax.lax.ragged_all_to_all's semantics (its docstring) in NumPy."""

from __future__ import annotations

import numpy as np


def layout(devices: int, seed: int, per_peer: int, rows: int = 24, out_rows: int = 30):
    """Random slices, some empty, at random places: every device's (input_offsets,
    send_sizes, output_offsets, recv_sizes), each int32 (devices, K), K = devices ·
    per_peer, for operands of `rows` rows and outputs of `out_rows`."""
    rng = np.random.default_rng(seed)
    k = devices * per_peer
    send = np.minimum(rng.integers(0, 4, size=(devices, k)), rows // k)
    in_off = np.zeros((devices, k), np.int32)
    for r in range(devices):  # the slices in a random order, not overlapping
        order = rng.permutation(k)
        starts = np.concatenate([[0], np.cumsum(send[r][order])[:-1]])
        slack = rows - int(send[r].sum())
        in_off[r][order] = starts + rng.integers(0, min(slack, 2) + 1)
    recv = np.zeros((devices, k), np.int32)
    out_off = np.zeros((devices, k), np.int32)
    for b in range(devices):  # receiver b's rows, filled from its peers in a random order
        slots = [(q, t) for q in range(devices) for t in range(per_peer)]
        pos = int(rng.integers(0, 3))
        for j in rng.permutation(len(slots)):
            q, t = slots[j]
            size = send[q, b * per_peer + t]
            recv[b, q * per_peer + t] = size
            out_off[q, b * per_peer + t] = pos
            pos += size
    if pos > out_rows:
        raise ValueError(f"{pos} rows received do not fit an output of {out_rows}")
    return in_off, send.astype(np.int32), out_off, recv


def reference(operand, output, in_off, send, out_off, recv):
    """Every device's result (stacked along dimension 0) as the docstring defines it."""
    devices, k = send.shape
    per_peer = k // devices
    want = output.copy()
    for q in range(devices):
        for i in range(k):
            b, size = i // per_peer, send[q, i]
            rows = operand[q, in_off[q, i] : in_off[q, i] + size]
            want[b, out_off[q, i] : out_off[q, i] + size] = rows
    return want
