"""Per-machine constants of the cost model (xla_ffi/algorithms/select.h): where they are
stored, and how they are applied to the native model.

``python -m jax_accl.bench --calibrate`` measures them on this machine and stores them in
``$JAX_ACCL_CACHE`` (default ``~/.cache/jax_accl``)/cost_model.json; the first jax_accl
call lowered in a process loads that file when it exists, so the automatic choice uses
this machine's numbers.

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
The constants between hosts (net_alpha, net_beta) keep their defaults unless given;
JAX_ACCL_LINK_GBITS states net_beta (a rail's payload rate) over both.
"""

from __future__ import annotations

import json
import threading
import warnings
from pathlib import Path

from jax_accl import config

# The constants of one host (fitted by `bench --calibrate` from its one-host timings).
ONE_HOST = ("shm_alpha", "shm_process_alpha", "shm_beta", "cma_beta")


def cache_path() -> Path:
    return config.value("JAX_ACCL_CACHE") / "cost_model.json"


_loaded = False
_load_lock = threading.Lock()


def ensure_loaded() -> None:
    """load() once per process: called at job start (jax.distributed.initialize) and
    where jax_accl first lowers a call, before any choice of the cost model is made."""
    global _loaded
    with _load_lock:
        if not _loaded:
            _loaded = True
            load()


def load() -> dict | None:
    """Applies the stored constants and calibrated lines to the native cost model (what
    the file lacks keeps its default); returns them, or None where there is no file. A
    file that cannot be applied is reported (a warning naming it and why) and skipped."""
    path = cache_path()
    apply_stated_wire()
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
        warnings.warn(
            f"jax_accl: ignoring {path} (run `python -m jax_accl.bench "
            f"--calibrate` again): {type(e).__name__}: {e}",
            stacklevel=2,
        )
        from jax_accl import _accl

        _accl.clear_measured_one_host()
        return None
    return stored


def apply_stated_wire() -> None:
    """JAX_ACCL_LINK_GBITS, where set: a rail's payload rate as the model's net_beta."""
    gbits = config.value("JAX_ACCL_LINK_GBITS")
    if gbits is not None:
        from jax_accl import _accl

        _accl.set_cost_model(net_beta=8.0 / (gbits * 1e9))


def apply(stored: dict) -> None:
    """Sets the constants in `stored` (the wire JAX_ACCL_LINK_GBITS states over a stored
    net_beta) and replaces the calibrated one-host lines by its own."""
    from jax_accl import _accl

    _accl.set_cost_model(**{k: float(v) for k, v in stored.items() if k in _accl.get_cost_model()})
    apply_stated_wire()
    _accl.clear_measured_one_host()
    for shape, lines in stored.get("one_host", {}).items():
        processes, k = (int(x) for x in shape.split("x"))
        _accl.set_measured_one_host(
            processes, k, {a: (line["latency"], line["per_byte"]) for a, line in lines.items()}
        )


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
