"""Per-machine constants of the cost model (xla_ffi/algorithms/select.h).

``python -m jax_accl.bench --calibrate`` measures them on this machine and stores them in
``$JAX_ACCL_CACHE`` (default ``~/.cache/jax_accl``)/cost_model.json; ``import jax_accl``
loads that file when it exists, so the automatic choice uses this machine's numbers.
  alpha: a synchronisation among the device threads (half a small reduce-broadcast,
         which has two sync points and moves almost nothing);
  beta:  seconds per byte of memory traffic (a large copy, read and write counted);
  gamma: seconds per byte reduced (a large NumPy add, its three streams counted).
The constants between hosts (net_alpha, net_beta) keep their defaults unless given.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

FIELDS = ("alpha", "beta", "gamma", "net_alpha", "net_beta")


def cache_path() -> Path:
    root = os.environ.get("JAX_ACCL_CACHE") or os.path.join(Path.home(), ".cache", "jax_accl")
    return Path(root) / "cost_model.json"


def load() -> dict | None:
    """Applies the stored constants to the native cost model; returns them (or None)."""
    from jax_accl import _accl
    path = cache_path()
    try:
        stored = json.loads(path.read_text())
        values = [float(stored[k]) for k in FIELDS]
    except (OSError, ValueError, KeyError):
        return None
    _accl.set_cost_model(*values)
    return dict(zip(FIELDS, values))


def _best_seconds(fn, reps: int = 5) -> float:
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def measure(small_op_seconds: float) -> dict:
    """Constants from a small reduce-broadcast's time per op and large array kernels."""
    from jax_accl import _accl
    n = 64 << 20
    src, dst = np.ones(n // 8), np.empty(n // 8)
    beta = _best_seconds(lambda: np.copyto(dst, src)) / (2 * n)
    a, b = np.ones(n // 8), np.ones(n // 8)
    gamma = _best_seconds(lambda: np.add(a, b, out=dst)) / (3 * n)
    current = dict(zip(FIELDS, _accl.get_cost_model()))
    return {"alpha": small_op_seconds / 2, "beta": beta, "gamma": gamma,
            "net_alpha": current["net_alpha"], "net_beta": current["net_beta"]}


def store(values: dict) -> Path:
    from jax_accl import _accl
    path = cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(values, indent=1))
    _accl.set_cost_model(*[values[k] for k in FIELDS])
    return path
