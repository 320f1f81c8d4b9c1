"""The memory limit of an all-reduce on one host: t_min = 2·n·S/B, with B the copy
bandwidth of every core at once, NumPy's and a non-temporal one, measured here."""

from __future__ import annotations

import os
import threading
import time

import numpy as np

from jax_accl import _accl


def copy_bandwidths(nbytes: int = 64 << 20, reps: int = 7) -> dict:
    """Bytes per second moved by large copies on every core at once (each core copies its
    own `nbytes` array; read + write counted once each), the best of `reps`:
    "copy", NumPy's copy (the issue's B), and "stream", a copy with non-temporal stores,
    which skips reading the destination first (the stricter limit)."""
    cores = os.cpu_count() or 1
    pairs = [(np.empty(nbytes // 8), np.ones(nbytes // 8)) for _ in range(cores)]
    for dst, src in pairs:
        np.copyto(dst, src)  # fault the pages in
    copies = {
        "copy": lambda dst, src: np.copyto(dst, src),
        "stream": lambda dst, src: _accl.stream_copy(dst.ctypes.data, src.ctypes.data, nbytes),
    }
    best = {}
    for _ in range(reps):
        for kind, copy in copies.items():
            threads = [threading.Thread(target=copy, args=pair) for pair in pairs]
            start = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            best[kind] = min(best.get(kind, float("inf")), time.perf_counter() - start)
    return {kind: 2 * nbytes * cores / seconds for kind, seconds in best.items()}


def fastest(*measurements: dict) -> dict:
    """Per kind, the highest of several copy_bandwidths() results: the machine's memory
    speed drifts by up to 2x within minutes here, and the limit must be the strict one."""
    return {kind: max(m[kind] for m in measurements) for kind in measurements[0]}


def add_memory_limits(rows: list[dict], bandwidths: dict) -> None:
    """t_min = 2·n·S/B for both copy bandwidths."""
    for r in rows:
        r["memory_limit_s"] = 2 * r["devices"] * r["size_bytes"] / bandwidths["copy"]
        r["memory_limit_stream_s"] = 2 * r["devices"] * r["size_bytes"] / bandwidths["stream"]


def describe_bandwidths(bandwidths: dict) -> str:
    return (
        f"copy bandwidth B = {bandwidths['copy'] / 1e9:.1f} GB/s (NumPy copy, all cores), "
        f"{bandwidths['stream'] / 1e9:.1f} GB/s (non-temporal copy)"
    )


MEMORY_LIMITS = [
    ("vs copy", lambda r: r["memory_limit_s"]),
    ("vs NT copy", lambda r: r["memory_limit_stream_s"]),
]
