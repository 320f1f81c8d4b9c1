"""Every JAX_ACCL_* environment variable, declared once: its default, when it is read and
what it does. This module is the only reader of the environment (the native core gets
the values from here); the knob table of docs/knobs.md is generated from KNOBS
(``python -m jax_accl.config`` prints it). Imports nothing of jax_accl at the top: the
interpreter start-up hook (startup/_jax_accl_startup.py) loads this file alone."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable
from pathlib import Path

# The variables named JAX_ACCL_* that are not knobs (the soak tests' length).
NOT_KNOBS = ("JAX_ACCL_SOAK",)


def _number(convert, text: str, expected: str, ok) -> float:
    """convert(text), where ok(value); else ValueError(expected): an error names what
    the knob accepts, whether the text is no number or a number out of range."""
    try:
        value = convert(text)
    except ValueError:
        raise ValueError(expected) from None
    if not ok(value):
        raise ValueError(expected)
    return value


def _finite(low: float, strict: bool):
    return lambda v: v < float("inf") and (v > low if strict else v >= low)


def _positive_float(text: str) -> float:
    return _number(float, text, "expected a positive number of seconds, e.g. 30", _finite(0, True))


def _non_negative_float(text: str) -> float:
    return _number(float, text, "expected a number of seconds >= 0, e.g. 10", _finite(0, False))


def _link_gbits(text: str) -> float | None:
    if not text:
        return None
    return _number(float, text, "expected a positive number of Gbit/s, e.g. 25", _finite(0, True))


def _integer_at_least(low: int) -> Callable[[str], int]:
    return lambda text: _number(int, text, f"expected an integer >= {low}", lambda v: v >= low)


def _auto_or_integer_at_least(low: int) -> Callable[[str], int | str]:
    expected = f"expected auto or an integer >= {low}"
    return lambda text: (
        "auto" if text == "auto" else _number(int, text, expected, lambda v: v >= low)
    )


def _positive_size(text: str) -> int:
    from jax_accl.units import parse_size  # here: the start-up hook loads this file alone

    expected = "expected a positive byte count, e.g. 67108864 or 64MiB"
    return _number(parse_size, text, expected, lambda v: v > 0)


def _switch(text: str) -> bool:
    value = text.lower()
    if value not in ("0", "1", "false", "true"):
        raise ValueError("expected 0 or 1 (or false, true)")
    return value in ("1", "true")


def _one_of(choices) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}")
        return text

    return parse


def _wire_dtype(text: str) -> str:
    if text not in ("", "bfloat16"):
        raise ValueError("expected bfloat16 (or unset: float32 travels as float32)")
    return text


def _port_range(text: str) -> tuple[int, int]:
    if text == "":
        return (0, 0)
    first, sep, last = text.partition("-")
    try:
        low, high = int(first), int(last if sep else first)
    except ValueError:
        raise ValueError("expected a port range such as 40000-40100") from None
    if not 1 <= low <= high <= 65535:
        raise ValueError("expected ports 1-65535, the first not above the last")
    return (low, high)


def _algorithm(text: str) -> str:
    # The native module's list, read when parsed: jax_accl's first import (before jax's,
    # with JAX_ACCL_XLA_COLLECTIVES=1) reads the knobs before the module is loaded.
    from jax_accl import names

    return _one_of(names.ALGORITHMS)(text)


def _congestion_control(text: str) -> str:
    if text == "system":
        return ""
    if not text.replace("_", "").isalnum():
        raise ValueError("expected `system` or an algorithm's name, e.g. reno or cubic")
    return text


def _debug_level(text: str) -> str:
    if text.upper() not in ("", "INFO", "DEBUG"):
        raise ValueError("expected INFO or DEBUG (or unset)")
    return text.upper()


@dataclasses.dataclass(frozen=True)
class Knob:
    name: str
    default: str  # as it would be written in the environment
    read: str  # when jax_accl reads it
    doc: str
    parse: Callable[[str], object] = str


KNOBS = {
    k.name: k
    for k in [
        Knob(
            "JAX_ACCL_TIMEOUT_S",
            "120",
            "each call, when traced",
            "deadline of one collective, in seconds; on expiry every waiting rank raises, "
            "naming the ranks that never arrived",
            _positive_float,
        ),
        Knob(
            "JAX_ACCL_ALGORITHM",
            "auto",
            "each call, when traced",
            'the algorithm of every all-reduce with `algorithm="auto"`: `direct`, `ring`, '
            "`halving_doubling`, `reduce_broadcast` (across processes: by cross-memory "
            "attach, on one host) or `hierarchical` (across processes); of every all-to-all: "
            "`direct` or `hierarchical` (by host), the others leave it the runtime's choice",
            _algorithm,
        ),
        Knob(
            "JAX_ACCL_FUSION_BYTES",
            "64MiB",
            "each call, when traced",
            "largest bucket when a pytree is fused into one call per dtype (bytes, or `16MiB`)",
            _positive_size,
        ),
        Knob(
            "JAX_ACCL_WIRE_DTYPE",
            "",
            "each call, when traced (XLA's own collectives: job start)",
            "`bfloat16`: every float32 sum jax_accl runs that passes no `wire_dtype` "
            "(`jax_accl.psum`/`pmean`, routed `jax.lax.psum`, the gradient all-reduces "
            "routing makes, and with `JAX_ACCL_XLA_COLLECTIVES=1` XLA's float32 sum "
            'all-reduces) travels as bfloat16, halving its bytes (docs/api.md, "bfloat16 on '
            'the wire"); other dtypes and reductions stay exact; unset: off',
            _wire_dtype,
        ),
        Knob(
            "JAX_ACCL_ROUTING",
            "0",
            "import",
            "`1`: every all-reduce of every program is jax_accl's, as inside `patch_psum()` "
            "(see Training)",
            _switch,
        ),
        Knob(
            "JAX_ACCL_DEBUG",
            "",
            "import",
            "`INFO`: topology, rails, algorithm choices, once each; `DEBUG`: also one line "
            "per all-reduce per device",
            _debug_level,
        ),
        Knob(
            "JAX_ACCL_CACHE",
            "~/.cache/jax_accl",
            "job start, or the first call lowered",
            "where `bench --calibrate` stores what the first lowered call loads: the "
            "cost-model constants, the calibrated one-host lines and the wire between "
            "hosts (in a job, all of them process 0's, at job start, for every process); "
            "a cost_model.json that is not a regular file of this user or holds a value "
            "the planner cannot use is one warning and the built-in model",
            lambda text: Path(os.path.expanduser(text)),
        ),
        Knob(
            "JAX_ACCL_RAILS",
            "auto",
            "job start",
            "interfaces between hosts: `auto` (every interface that is up and not "
            "loopback), or `eth1,eth2`, optionally weighted `eth1:3,eth2:1`",
        ),
        Knob(
            "JAX_ACCL_STRIPES_PER_RAIL",
            "auto",
            "job start",
            "TCP connections per rail and peer, process 0's for every process: `auto`: at "
            "job start process 0 times one TCP flow against 8 at once to the first "
            "process on another host and opens as many as pay (where a flow gets a "
            "fraction of the link, as clouds cap each flow; one where one flow fills it; "
            "jax_accl.stripes), or a count",
            _auto_or_integer_at_least(1),
        ),
        Knob(
            "JAX_ACCL_RAIL_CHOICE",
            "model",
            "job start",
            "process 0's, for every process: `model`: stripe over every rail where process "
            "0's stored wire calibration "
            "(`bench --calibrate --hosts 2`) measured the rails together carrying at least "
            "1.15x what one carries, else over the first only (every rail without a "
            "calibration of as many rails, or with JAX_ACCL_LINK_GBITS); `all`: every rail",
            _one_of(("model", "all")),
        ),
        Knob(
            "JAX_ACCL_HOST_ID",
            "",
            "job start",
            "the host this process belongs to (default: the hostname): processes with the "
            "same id share memory, others use TCP",
        ),
        Knob(
            "JAX_ACCL_CMA",
            "1",
            "job start",
            "`0`: large all-reduces between processes of a host go through the "
            "shared-memory rings (the hierarchy, or a flat algorithm) instead of "
            "cross-memory attach",
            _switch,
        ),
        Knob(
            "JAX_ACCL_PORTS",
            "",
            "job start",
            "the TCP ports jax_accl's listeners (one per rail and process) may take, e.g. "
            "`40000-40100` to open in a firewall; each takes the first free one; unset: any",
            _port_range,
        ),
        Knob(
            "JAX_ACCL_XLA_COLLECTIVES",
            "0",
            "interpreter start-up (jax_accl's .pth hook), or import of jax_accl",
            "`1`: jax_accl becomes XLA:CPU's collectives backend (the MPI ABI jaxlib "
            "loads), so the collectives XLA inserts in any multi-process jit program run "
            "on jax_accl, in every Python process with the variable (docs/xla_collectives.md)",
            _switch,
        ),
        Knob(
            "JAX_ACCL_SPIN_US",
            "50",
            "job start",
            "microseconds a rank waiting for a peer's bytes over TCP keeps looking (yielding "
            "its core) before it sleeps: on a fast wire a sleep's wake-up costs as much as "
            "the message; 0 sleeps at once (the least CPU)",
            _integer_at_least(0),
        ),
        Knob(
            "JAX_ACCL_STALL_S",
            "10",
            "import",
            "where XLA:CPU's thread pool has fewer than two threads per device (JAX made its "
            "CPU client before jax_accl was imported, or `PJRT_NPROC` is smaller): seconds a "
            "call waits for devices of its own process that began no jax_accl call of the "
            "launch (the process idle, watched without a gap) before it fails as XLA:CPU's "
            "stall, instead of at `JAX_ACCL_TIMEOUT_S` (docs/architecture.md: launches in "
            "flight); with jax_accl's pool (two threads per device) that stall cannot happen "
            "and a late device (a host callback, a debugger's prompt, a stopped process) is "
            "waited for to `JAX_ACCL_TIMEOUT_S`; `0`: never",
            _non_negative_float,
        ),
        Knob(
            "JAX_ACCL_TCP_CONGESTION",
            "reno",
            "job start",
            "the TCP congestion control of jax_accl's connections (each end's, for what it "
            "sends); `system`: the kernel's default (net.ipv4.tcp_congestion_control). "
            "Reno (set on each socket before it connects): on this project's fast-wire "
            "harness 1.8-2.7x faster than the kernel's BBR from 1 to 256 MiB with one rank "
            "per host, up to 1.5x with two, and faster on shaped rails (docs/benchmarks.md)",
            _congestion_control,
        ),
        Knob(
            "JAX_ACCL_LINK_GBITS",
            "",
            "job start, or the first call lowered",
            "the payload one rail carries between hosts, in Gbit/s (the same in every "
            "process): the cost model's wire (net_beta), by which the runtime chooses the "
            "algorithm and pipeline chunks between hosts and fusion its buckets, every rail "
            "used (a stored wire calibration is then not used); unset: a stored wire "
            "calibration's (process 0's, `bench --calibrate --hosts 2`), else the model's "
            "10 Gbit/s",
            _link_gbits,
        ),
        Knob(
            "JAX_ACCL_PIPELINE_CHUNKS",
            "0",
            "each call, when traced (XLA's own collectives: job start)",
            "chunks the hierarchy between hosts pipelines a call into: 0 the cost model's "
            "choice, 1 off, n forced (the same in every process)",
            _integer_at_least(0),
        ),
    ]
}


def environment(name: str) -> str | None:
    """A variable jax_accl reads or sets that is not its own knob (MPITRAMPOLINE_LIB;
    PJRT_NPROC, NPROC and XLA_FLAGS for XLA:CPU's pool, cpu_threads.py)."""
    return os.environ.get(name)


def environment_with(**variables: str) -> dict[str, str]:
    """This process's environment with `variables` set, for a child process."""
    return {**os.environ, **variables}


def set_environment(name: str, text: str) -> None:
    os.environ[name] = text


@contextlib.contextmanager
def environment_set(name: str, text: str):
    """`name`=`text` in this process's environment while the block runs, then as before
    (unset, or its earlier value)."""
    before = os.environ.get(name)
    os.environ[name] = text
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


@contextlib.contextmanager
def knob_set(name: str, text: str):
    """The knob `name`=`text` for the programs traced in the block, within one process.

    jax_accl reads a knob "when traced" as JAX traces, differentiates or lowers a
    program, and JAX keeps what it made (each nested jit function's trace, a linear
    function's transpose, a lowering) in caches that do not key on the environment: a
    program traced after a bare change of the variable can reuse pieces traced before
    it. So JAX's caches are cleared on entry and on exit (everything is traced again)."""
    import jax

    jax.clear_caches()
    try:
        with environment_set(name, text):
            yield
    finally:
        jax.clear_caches()


def value(name: str):
    """The knob's parsed value from the environment, or its default; a bad value raises
    ValueError naming the variable, the value and what is expected."""
    knob = KNOBS[name]
    text = os.environ.get(name, "").strip() or knob.default
    try:
        return knob.parse(text)
    except ValueError as e:
        raise ValueError(f"{name}={text!r}: {e}") from None


def misspelt(environ=os.environ) -> list[str]:
    """A warning for each JAX_ACCL_* variable that is no knob, naming the closest knob:
    a misspelt knob would otherwise leave the default in force without a word."""
    import difflib

    return [
        f"jax_accl: {name} is not a jax_accl knob and is ignored; did you mean "
        f"{difflib.get_close_matches(name, KNOBS, n=1, cutoff=0)[0]}? (every knob: "
        "python -m jax_accl.config)"
        for name in sorted(environ)
        if name.startswith("JAX_ACCL_") and name not in KNOBS and name not in NOT_KNOBS
    ]


@dataclasses.dataclass(frozen=True)
class Config:
    """The knobs a call reads when it is traced."""

    timeout_s: float
    algorithm: str
    fusion_bytes: int


def current() -> Config:
    return Config(
        timeout_s=value("JAX_ACCL_TIMEOUT_S"),
        algorithm=value("JAX_ACCL_ALGORITHM"),
        fusion_bytes=value("JAX_ACCL_FUSION_BYTES"),
    )


def markdown_table() -> str:
    rows = ["| variable | default | read at | what it does |", "|---|---|---|---|"]
    rows += [
        f"| `{k.name}` | {f'`{k.default}`' if k.default else '(unset)'} | {k.read} | {k.doc} |"
        for k in KNOBS.values()
    ]
    rows += [
        "",
        'A knob read "when traced" holds for the programs JAX traces after it is set. To '
        "change one within a process, use `jax_accl.config.knob_set(name, value)` (a context "
        "manager) or call `jax.clear_caches()` after changing the variable: JAX keeps what it "
        "traced (nested jit functions, transposes, lowerings) in caches that do not key on the "
        "environment, so without that a program traced later can reuse pieces traced under the "
        "old value.",
    ]
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
