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
Between hosts ("wire", ``bench --calibrate --hosts 2``, wire_constants()): one rail's and
every rail's rate each way at once (a bidirectional stream test) and a small message's
step between two hosts (a forced direct all-reduce at 4-256 KiB, its latency doubled:
direct between two costs alpha/2). At job start every process takes process 0's wire
(jax_accl.distributed), which also decides whether the job stripes over every rail
(jax_accl.rails.paying): then net_beta is what the rails carry together, per rail; else
one rail's. JAX_ACCL_LINK_GBITS states the wire instead (net_beta, a rail's payload rate,
every rail used): the stored wire is then not used.
"""

from __future__ import annotations

import json
import threading
import warnings
from pathlib import Path

from jax_accl import config, rails

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
    config.value("JAX_ACCL_RAIL_CHOICE")  # a bad value is its own error, not the file's
    try:
        stored = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        warnings.warn(f"jax_accl: ignoring {path}: {e}", stacklevel=2)
        return None
    try:
        apply(stored)
    except (ValueError, TypeError, KeyError, AttributeError, ZeroDivisionError) as e:
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
    wire = stored.get("wire")
    if _job_wire is not None:  # in a job: its wire, whatever this process's file holds
        _set_net(*_job_wire)
    elif wire is not None and not wire_stated():  # over the rails a job would stripe over
        _accl.set_cost_model(**wire_constants(wire, rails.paying_count(wire["rails"], wire)))
    apply_stated_wire()
    _accl.clear_measured_one_host()
    for shape, lines in stored.get("one_host", {}).items():
        processes, k = (int(x) for x in shape.split("x"))
        _accl.set_measured_one_host(
            processes, k, {a: (line["latency"], line["per_byte"]) for a, line in lines.items()}
        )


def wire_stated() -> bool:
    """JAX_ACCL_LINK_GBITS is set: the operator states the wire (every rail that rate), and
    a stored wire calibration is not used."""
    return config.value("JAX_ACCL_LINK_GBITS") is not None


def stored_wire() -> dict | None:
    """The stored wire calibration ("wire": rates and net_alpha), or None (none stored, the
    wire stated, or one that cannot be used: reported as load() does)."""
    if wire_stated():
        return None
    try:
        wire = json.loads(cache_path().read_text()).get("wire")
    except (OSError, ValueError, AttributeError):
        return None
    if wire is None:
        return None
    try:
        wire_constants(wire, 1)
        if not (rails.rails_gain(wire) > 0 and wire["net_alpha"] > 0 and wire["rails"] >= 1):
            raise ValueError("rates, net_alpha and rails must be positive")
    except (TypeError, KeyError, ValueError, ZeroDivisionError) as e:
        warnings.warn(f"jax_accl: ignoring the wire in {cache_path()}: {e!r}", stacklevel=2)
        return None
    return wire


def wire_constants(wire: dict, rails: int) -> dict:
    """net_alpha and net_beta (a rail's share of what `rails` rails carry at once) from a
    wire calibration: every calibrated rail in use -> their rate together / rails, one
    rail -> one rail's, another count (a job with other rails) -> one rail's."""
    together = wire["rails"] > 1 and rails == wire["rails"]
    rate = wire["all_rails_bytes_per_s"] / rails if together else wire["one_rail_bytes_per_s"]
    return {"net_alpha": float(wire["net_alpha"]), "net_beta": 1.0 / float(rate)}


# The constants of the wire between hosts, the same in every process of a job: what
# process 0's wire sets, the model's own for the rest (net_step_bytes is not measured).
NET = ("net_alpha", "net_beta", "net_step_bytes")
_job_wire: tuple | None = None  # (wire or None, rails in use) of this process's job


def apply_wire(wire: dict | None, rails: int) -> None:
    """The job's wire (process 0's calibration) as the model's net_alpha/net_beta over
    `rails` rails in use, also over any later load() of this process's file; None
    (process 0 has none): the model's own, whatever this process's file says, so that
    every process plans alike; JAX_ACCL_LINK_GBITS still states net_beta."""
    global _job_wire
    _job_wire = (wire, rails)
    _set_net(wire, rails)
    apply_stated_wire()


def _set_net(wire: dict | None, rails: int) -> None:
    from jax_accl import _accl

    defaults = _accl.default_cost_model()
    measured = {} if wire is None else wire_constants(wire, rails)
    _accl.set_cost_model(**{name: measured.get(name, defaults[name]) for name in NET})


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
