"""The JAX_ACCL_* knobs of collectives (read at trace time; the rail knobs are read by
jax_accl/rails.py when a multi-process job starts)."""
from __future__ import annotations

import dataclasses
import os

ALGORITHMS = ("auto", "direct", "ring", "halving_doubling", "reduce_broadcast", "hierarchical")
OPS = ("sum", "prod", "min", "max")


@dataclasses.dataclass(frozen=True)
class Config:
    timeout_s: float = 120.0  # JAX_ACCL_TIMEOUT_S: deadline of one collective
    algorithm: str = "auto"   # JAX_ACCL_ALGORITHM: forces an algorithm for algorithm="auto"
    fusion_bytes: int = 64 << 20  # JAX_ACCL_FUSION_BYTES: largest bucket of fused leaves


def routing_default() -> bool:
    """JAX_ACCL_ROUTING=1: route every all-reduce of every program through jax_accl, as
    inside ``patch_psum()`` (jax_accl/routing.py); off by default."""
    value = os.environ.get("JAX_ACCL_ROUTING", "").strip().lower()
    if value not in ("", "0", "1", "false", "true"):
        raise ValueError(f"JAX_ACCL_ROUTING={value!r}: expected 0 or 1")
    return value in ("1", "true")


def pipeline_chunks() -> int:
    """JAX_ACCL_PIPELINE_CHUNKS: how many chunks the hierarchy between hosts pipelines a
    call into; 0 (default) lets the cost model choose, 1 turns pipelining off. Read when
    a multi-process job starts; every process must use the same value."""
    text = os.environ.get("JAX_ACCL_PIPELINE_CHUNKS", "").strip() or "0"
    try:
        chunks = int(text)
    except ValueError:
        chunks = -1
    if chunks < 0:
        raise ValueError(f"JAX_ACCL_PIPELINE_CHUNKS={text!r}: expected an integer >= 0")
    return chunks


def current() -> Config:
    timeout = float(os.environ.get("JAX_ACCL_TIMEOUT_S", "") or Config.timeout_s)
    if timeout <= 0:
        raise ValueError(f"JAX_ACCL_TIMEOUT_S must be positive, got {timeout}")
    algorithm = os.environ.get("JAX_ACCL_ALGORITHM", "") or Config.algorithm
    if algorithm not in ALGORITHMS:
        raise ValueError(f"JAX_ACCL_ALGORITHM={algorithm!r}: expected one of {ALGORITHMS}")
    fusion = int(os.environ.get("JAX_ACCL_FUSION_BYTES", "") or Config.fusion_bytes)
    if fusion <= 0:
        raise ValueError(f"JAX_ACCL_FUSION_BYTES must be positive, got {fusion}")
    return Config(timeout_s=timeout, algorithm=algorithm, fusion_bytes=fusion)
