"""The native core without XLA: one all-reduce with a thread per rank (the native test tier)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jax_accl import _accl_testing
from jax_accl.errors import AcclError


def allreduce_threads(
    inputs: Sequence[np.ndarray],
    op: str = "sum",
    algorithm: str = "auto",
    *,
    timeout_s: float = 60.0,
    present: Sequence[int] | None = None,
    ops: Sequence[str] | None = None,
    algorithms: Sequence[str] | None = None,
    wire_bf16: bool = False,
) -> list[np.ndarray]:
    """All-reduce ``inputs[r]`` (rank r's buffer) with one native thread per rank.

    ``ops``/``algorithms`` give per-rank values (to test disagreement); ranks not in
    ``present`` never arrive (to test timeouts); ``wire_bf16``: a float32 sum sent as
    bfloat16 (docs/api.md, "bfloat16 on the wire"). Raises AcclError naming every rank
    that failed.
    """
    inputs = [np.ascontiguousarray(x) for x in inputs]
    outputs = [np.empty_like(x) for x in inputs]
    n = len(inputs)
    errors = _accl_testing.allreduce_threads(
        [x.ctypes.data for x in inputs],
        [y.ctypes.data for y in outputs],
        [x.size for x in inputs],
        [x.dtype.name for x in inputs],
        list(ops) if ops is not None else [op] * n,
        list(algorithms) if algorithms is not None else [algorithm] * n,
        list(range(n)) if present is None else list(present),
        timeout_s,
        wire_bf16,
    )
    failed = {r: e for r, e in enumerate(errors) if e}
    if failed:
        raise AcclError("; ".join(f"rank {r}: {e}" for r, e in failed.items()), failed)
    return outputs
