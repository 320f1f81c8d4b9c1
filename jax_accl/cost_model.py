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

In a job every process plans by process 0's stored model, constants, lines and wire
(apply_job()), so that no two processes plan a call differently. The file is read only
if it is a regular file of this user whose every value the planner can use
(read_stored()); anything else is one warning and the built-in model.
"""

from __future__ import annotations

import json
import math
import os
import stat
import threading
import warnings
from pathlib import Path

from jax_accl import config, rails
from jax_accl.errors import AcclWarning

# The constants of one host (fitted by `bench --calibrate` from its one-host timings).
ONE_HOST = ("shm_alpha", "shm_process_alpha", "shm_beta", "cma_beta")


def cache_path() -> Path:
    return config.value("JAX_ACCL_CACHE") / "cost_model.json"


_loaded = False
_load_lock = threading.Lock()


def ensure_loaded() -> None:
    """load() once per process: called where jax_accl first lowers a call, before any
    choice of the cost model is made (in a job, apply_job() loads process 0's instead)."""
    global _loaded
    with _load_lock:
        if not _loaded:
            _loaded = True
            load()


def load() -> dict | None:
    """The built-in model, with the stored constants and calibrated lines over it (in a
    job, process 0's: apply_job()) applied to the native cost model; returns them, or
    None where there is none or it cannot be used (read_stored() warns)."""
    config.value("JAX_ACCL_RAIL_CHOICE")  # a bad value is its own error, not the file's
    stored = _job_model[0] if _job_model is not None else read_stored()
    apply(stored or {})
    return stored


# The largest file read: a calibration of every shape is a few KiB.
_MAX_BYTES = 1 << 20
_warned: set = set()  # (path, why) already reported: a bad file is one warning


def read_stored() -> dict | None:
    """The stored model, checked, or None: no file, or (with one warning naming the file,
    why and the command that makes a new one) not a regular file of this user (opened
    without blocking, so a named pipe is never waited on), not JSON, or a value the
    planner cannot use (check_stored())."""
    path = cache_path()
    try:
        data = _read_own_regular_file(path)
        if data is None:
            return None
        try:
            stored = json.loads(data)
        except (ValueError, RecursionError) as e:
            raise ValueError(f"not JSON: {type(e).__name__}: {e}") from None
        check_stored(stored)
    except ValueError as e:
        return _ignored(path, str(e))
    return stored


def _read_own_regular_file(path: Path) -> bytes | None:
    """The file's bytes, None if there is none, or ValueError saying why it is not read:
    opened without blocking (a named pipe with no writer), then checked to be a regular
    file of this user of at most _MAX_BYTES before a byte is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ValueError(e.strerror or str(e)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        if st.st_uid != os.geteuid():
            raise ValueError(f"owned by uid {st.st_uid}, not this user (uid {os.geteuid()})")
        data = os.read(fd, _MAX_BYTES + 1)
    except OSError as e:
        raise ValueError(e.strerror or str(e)) from None
    finally:
        os.close(fd)
    if len(data) > _MAX_BYTES:
        raise ValueError(f"larger than {_MAX_BYTES} bytes")
    return data


def _ignored(path: Path, why: str) -> None:
    if (str(path), why) not in _warned:
        _warned.add((str(path), why))
        warnings.warn(
            f"jax_accl: ignoring {path}: {why}; planning by the built-in cost model (run "
            "`python -m jax_accl.bench --calibrate` again to store a new one)",
            AcclWarning,
            stacklevel=3,
        )
    return None


def _number(v, what: str, *, zero: bool = False) -> None:
    """ValueError naming `what` unless v is a number, finite and > 0 (>= 0 with `zero`)."""
    ok = isinstance(v, (int, float)) and not isinstance(v, bool)
    try:
        x = float(v) if ok else math.nan
    except OverflowError:
        x = math.nan
    if not (math.isfinite(x) and (x >= 0 if zero else x > 0)):
        shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:40] + "..."
        raise ValueError(f"{what} must be a finite number {'>=' if zero else '>'} 0, not {shown}")


def check_stored(stored) -> None:
    """ValueError naming the first value of a stored model the planner cannot use: every
    constant a finite time or time per byte > 0 (net_step_bytes >= 0); the wire's rates
    and net_alpha > 0 and its rails a whole number >= 1; every one-host line's latency
    and per-byte time finite and >= 0, of a "PxK" shape and an algorithm the runtime
    knows."""
    from jax_accl import _accl

    if not isinstance(stored, dict):
        raise ValueError("not an object of constants")
    for name in _accl.default_cost_model():
        if name in stored:
            _number(stored[name], name, zero=name == "net_step_bytes")
    wire = stored.get("wire")
    if wire is not None:
        if not isinstance(wire, dict):
            raise ValueError("the wire is not an object")
        for name in ("one_rail_bytes_per_s", "all_rails_bytes_per_s", "net_alpha"):
            _number(wire.get(name), f"the wire's {name}")
        rails_ = wire.get("rails")
        if not (isinstance(rails_, int) and not isinstance(rails_, bool) and rails_ >= 1):
            raise ValueError(f"the wire's rails must be a whole number >= 1, not {rails_!r}")
    tables = stored.get("one_host", {})
    if not isinstance(tables, dict):
        raise ValueError("one_host is not an object")
    for shape, lines in tables.items():
        p, _, k = shape.partition("x")
        if not (p.isdigit() and k.isdigit() and int(p) >= 1 and int(k) >= 1):
            raise ValueError(f"one_host {shape!r}: not a shape PxK")
        if not isinstance(lines, dict):
            raise ValueError(f"one_host {shape}: not an object")
        for algorithm, line in lines.items():
            if algorithm not in _accl.ALGORITHM_CODES or not isinstance(line, dict):
                raise ValueError(f"one_host {shape}: {algorithm!r} is not a calibrated line")
            for field in ("latency", "per_byte"):
                _number(line.get(field), f"one_host {shape} {algorithm} {field}", zero=True)


def stated_gbits() -> float | None:
    """The wire's rate JAX_ACCL_LINK_GBITS states: in a job, process 0's (apply_job), so
    that a process whose environment says otherwise still plans as every other does."""
    if _job_model is not None:
        return _job_model[1]
    return config.value("JAX_ACCL_LINK_GBITS")


def apply_stated_wire() -> None:
    """JAX_ACCL_LINK_GBITS, where set: a rail's payload rate as the model's net_beta."""
    gbits = stated_gbits()
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
    return stated_gbits() is not None


def stored_wire() -> dict | None:
    """The stored wire calibration ("wire": rates and net_alpha), or None (none stored, the
    wire stated, or one that cannot be used: reported as load() does)."""
    if wire_stated():
        return None
    stored = read_stored()
    return None if stored is None else stored.get("wire")


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
_job_model: tuple | None = None  # (process 0's stored model, its stated Gbit/s) in a job


def apply_job(stored: dict | None, wire: dict | None, rails: int, gbits=None) -> None:
    """At job start, every constant that decides a plan as process 0's, so that no two
    processes plan a call differently: the built-in model with process 0's stored
    constants and one-host lines over it (`stored`, read_stored()'s; None: the built-in
    model, whatever this process's file says), and its wire as net_alpha/net_beta over
    `rails` rails in use (None: the model's own); process 0's JAX_ACCL_LINK_GBITS
    (`gbits`) states net_beta, whatever this process's says (a warning where they
    differ). A later load() in this process applies the same."""
    global _job_wire, _job_model, _loaded
    from jax_accl import _accl

    own = config.value("JAX_ACCL_LINK_GBITS")
    if own != gbits:
        warnings.warn(
            f"jax_accl: JAX_ACCL_LINK_GBITS is {own} here but {gbits} in process 0: every "
            "process plans by process 0's (set it alike on every process)",
            AcclWarning,
            stacklevel=2,
        )
    with _load_lock:
        _loaded = True  # this process's own file is not read in a job
        _job_wire, _job_model = (wire, rails), (stored, gbits)
        _accl.set_cost_model(**_accl.default_cost_model())
        apply(stored or {})


def _set_net(wire: dict | None, rails: int) -> None:
    from jax_accl import _accl

    defaults = _accl.default_cost_model()
    measured = {} if wire is None else wire_constants(wire, rails)
    _accl.set_cost_model(**{name: measured.get(name, defaults[name]) for name in NET})


def store(values: dict) -> Path:
    """Merges `values` (constants; "one_host": {"PxK": {algorithm: line}}) into the stored
    ones and applies the result."""
    path = cache_path()
    stored = read_stored() or {}
    tables = {**stored.get("one_host", {}), **values.get("one_host", {})}
    stored.update(values)
    if tables:
        stored["one_host"] = tables
    apply(stored)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(stored, indent=1))
    return path
