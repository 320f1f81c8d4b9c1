"""Per-machine constants of the cost model (xla_ffi/algorithms/select.h).

``python -m jax_accl.bench --calibrate`` measures them on this machine and stores them in
``$JAX_ACCL_CACHE`` (default ``~/.cache/jax_accl``)/cost_model.json; ``import jax_accl``
loads that file when it exists, so the automatic choice uses this machine's numbers.

Devices of one process (in_process()):
  alpha: a synchronisation among the device threads (half a small reduce-broadcast,
         which has two sync points and moves almost nothing);
  beta:  seconds per byte of memory traffic (a large copy, read and write counted);
  gamma: seconds per byte reduced (a large NumPy add, its three streams counted).
Processes of one host, per group shape P x k (processes x devices per process):
  "one_host": every candidate of the automatic choice timed at sizes from 1 KiB to 4 MiB
  and fitted with a line, latency + bytes·per_byte (fit_line()); the automatic choice on
  one host goes by these lines for that shape (xla_ffi/algorithms/measured.h). Fitted to
  all those points (fit_one_host()), the model's one-host constants, for other shapes:
  shm_alpha, shm_process_alpha: a message step between device threads of one process,
         and one between processes; shm_beta: a byte through the shared-memory rings;
  cma_beta: a byte of the cross-memory-attach reduce-broadcast.
The constants between hosts (net_alpha, net_beta) keep their defaults unless given.
"""
from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path

import numpy as np

ONE_HOST = ("shm_alpha", "shm_process_alpha", "shm_beta", "cma_beta")

# What `bench --calibrate` times on every one-host shape: each candidate of the automatic
# choice (reduce_broadcast across processes is the cross-memory-attach one) at each size,
# largest first (the first few hundred all-reduces of a process run slower; at the large
# sizes that is lost in their warm-up); direct only up to 1 MiB, where it already takes
# 4x the others (10 ms per op at 8 ranks).
ONE_HOST_ALGORITHMS = ("direct", "ring", "halving_doubling", "reduce_broadcast")
ONE_HOST_SIZES = tuple(1 << e for e in range(22, 9, -2))  # 4 MiB .. 1 KiB
DIRECT_MAX_BYTES = 1 << 20


def cache_path() -> Path:
    root = os.environ.get("JAX_ACCL_CACHE") or os.path.join(Path.home(), ".cache", "jax_accl")
    return Path(root) / "cost_model.json"


def load() -> dict | None:
    """Applies the stored constants and calibrated lines to the native cost model (what
    the file lacks keeps its default); returns them, or None where there is no file. A
    file that cannot be applied is reported (a warning naming it and why) and skipped."""
    path = cache_path()
    try:
        stored = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        warnings.warn(f"jax_accl: ignoring {path}: {e}", stacklevel=2)
        return None
    try:
        apply(stored)
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        warnings.warn(f"jax_accl: ignoring {path} (run `python -m jax_accl.bench "
                      f"--calibrate` again): {type(e).__name__}: {e}", stacklevel=2)
        from jax_accl import _accl
        _accl.clear_measured_one_host()
        return None
    return stored


def apply(stored: dict) -> None:
    """Sets the constants in `stored` and replaces the calibrated one-host lines by its own."""
    from jax_accl import _accl
    _accl.set_cost_model(**{k: float(v) for k, v in stored.items()
                            if k in _accl.get_cost_model()})
    _accl.clear_measured_one_host()
    for shape, lines in stored.get("one_host", {}).items():
        processes, k = (int(x) for x in shape.split("x"))
        _accl.set_measured_one_host(processes, k, {a: (line["latency"], line["per_byte"])
                                                   for a, line in lines.items()})


def _best_seconds(fn, reps: int = 5) -> float:
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def in_process(small_op_seconds: float) -> dict:
    """alpha, beta, gamma from a small reduce-broadcast's time per op and large kernels."""
    n = 64 << 20
    src, dst = np.ones(n // 8), np.empty(n // 8)
    beta = _best_seconds(lambda: np.copyto(dst, src)) / (2 * n)
    a, b = np.ones(n // 8), np.ones(n // 8)
    gamma = _best_seconds(lambda: np.add(a, b, out=dst)) / (3 * n)
    return {"alpha": small_op_seconds / 2, "beta": beta, "gamma": gamma}


def _predictions(points, values: dict) -> np.ndarray:
    """The model's seconds at every (processes, k, algorithm, bytes) with `values` set,
    then restored."""
    from jax_accl import _accl
    saved = _accl.get_cost_model()
    try:
        _accl.set_cost_model(**values)
        return np.array([_accl.predict_one_host(a, p, k, b) for p, k, a, b in points])
    finally:
        _accl.set_cost_model(**saved)


def predicted(points) -> np.ndarray:
    """The current model's seconds at every (processes, k, algorithm, bytes)."""
    return _predictions(points, {})


def fit_one_host(measured: list[tuple[int, int, str, int, float]]) -> dict:
    """The one-host constants that best predict `measured` [(processes, k, algorithm,
    bytes, seconds)] (direct, ring, halving_doubling, reduce_broadcast), by least squares
    on the relative error: the model is linear in them. A constant the points cannot
    tell (shm_alpha where every step crosses processes, cma_beta without cross-memory
    attach) or that fits below zero keeps its current value and is left out."""
    points = [m[:4] for m in measured]
    seconds = np.array([m[4] for m in measured])
    weights = 1.0 / seconds
    free = list(ONE_HOST)
    while free:
        zero = {name: 0.0 for name in free}
        base = _predictions(points, zero)
        columns = np.stack([_predictions(points, {**zero, name: 1.0}) - base
                            for name in free], axis=1) * weights[:, None]
        told = np.abs(columns).max(axis=0) > 1e-9
        if not told.all():
            free = [name for name, ok in zip(free, told) if ok]
            continue
        x, *_ = np.linalg.lstsq(columns, (seconds - base) * weights, rcond=None)
        if (x > 0).all():
            return dict(zip(free, x.tolist()))
        free.pop(int(np.argmin(x)))
    return {}


def fit_line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(latency, per_byte), both >= 0, of the line through [(bytes, seconds)] with the least
    relative error, robustly: iteratively reweighted (Huber), so that a point off by more
    than 10% of the line (the difference of two noisy timings) counts as if it were 10% off."""
    x = np.array([float(b) for b, _ in points])
    y = np.array([t for _, t in points])
    w = 1.0 / y
    for _ in range(10):
        (a, b), *_ = np.linalg.lstsq(np.stack([w, x * w], axis=1), y * w, rcond=None)
        if b < 0:
            a, b = float(np.sum(y * w * w) / np.sum(w * w)), 0.0
        elif a < 0:
            a, b = 0.0, float(np.sum(x * y * w * w) / np.sum(x * x * w * w))
        line = np.maximum(a + b * x, 1e-12)
        off = np.abs(y - line) / line
        w = np.minimum(1.0, 0.1 / np.maximum(off, 1e-12)) ** 0.5 / line
    return float(a), float(b)


def model_choice(processes: int, k: int, size: int, algorithms) -> str:
    """The model's pick among `algorithms` on processes x k (measured times aside)."""
    from jax_accl import _accl
    return min(algorithms, key=lambda a: _accl.predict_one_host(a, processes, k, size))


def store(values: dict) -> Path:
    """Merges `values` (constants; "one_host": {"PxK": {algorithm: line}}) into the stored
    ones and applies the result."""
    path = cache_path()
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError):
        stored = {}
    tables = {**stored.get("one_host", {}), **values.get("one_host", {})}
    stored.update(values)
    if tables:
        stored["one_host"] = tables
    apply(stored)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(stored, indent=1))
    return path
