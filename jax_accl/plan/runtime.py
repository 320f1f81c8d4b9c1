"""The runtime's own plan of one all-reduce, for any layout: the native layout
(xla_ffi/topology/group_layout.h) and the native plan (xla_ffi/runtime/call_plan.h, the
function every call path of the runtime asks), bound as ``jax_accl._accl.group_layout``
and ``jax_accl._accl.plan``. Nothing here models or chooses anything: a layout is
described in Python (hosts x processes x devices, or per host the devices of each of its
processes, uneven allowed), and the schedule, protocol, chunks and predicted time are the
runtime's.

A layout given per host: ``[[2], [1, 1]]`` is host 0 with one process of 2 devices and
host 1 with two processes of 1 device; on the command line ``2/1,1`` (hosts separated by
``/``, a host's processes by ``,``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from jax_accl import _accl, config

Layout = list[list[int]]  # per host, the devices of each of its processes


def regular_layout(hosts: int, processes_per_host: int | Sequence[int], devices: int) -> Layout:
    """`hosts` hosts of `processes_per_host` processes (one number for all, or one per
    host) of `devices` devices each."""
    per_host = (
        [processes_per_host] * hosts
        if isinstance(processes_per_host, int)
        else list(processes_per_host)
    )
    if len(per_host) != hosts:
        raise ValueError(f"{len(per_host)} process counts for {hosts} hosts")
    if min(per_host + [hosts, devices]) < 1:
        raise ValueError("every count of a layout must be >= 1")
    return [[devices] * p for p in per_host]


def parse_layout(text: str) -> Layout:
    """``"2,1/2/1"`` -> [[2, 1], [2], [1]]."""
    try:
        layout = [[int(d) for d in host.split(",")] for host in text.split("/")]
    except ValueError:
        raise ValueError(
            f"a layout is per host the devices of its processes, e.g. 2,1/2: {text!r}"
        ) from None
    if not layout or min(min(host) for host in layout) < 1:
        raise ValueError(f"every process of a layout needs a device: {text!r}")
    return layout


def format_layout(layout: Layout) -> str:
    """[[2, 1], [2], [1]] -> "2,1/2/1"; a regular layout as hosts x processes x devices."""
    processes = {len(host) for host in layout}
    devices = {d for host in layout for d in host}
    if len(processes) == 1 and len(devices) == 1:
        return f"{len(layout)}x{processes.pop()}x{devices.pop()}"
    return "/".join(",".join(str(d) for d in host) for host in layout)


def places_of(layout: Layout) -> list[tuple[str, int]]:
    """(host, process) of every rank of `layout`, ranks numbered host by host, process by
    process."""
    places, process = [], 0
    for h, host in enumerate(layout):
        for devices in host:
            places += [(f"host{h}", process)] * devices
            process += 1
    return places


def group_layout(places: Sequence[tuple[str, int]]) -> dict:
    """The runtime's tiers of the group whose rank r lives at places[r] = (host, process):
    {"hosts", "thread_owners", "process_owners", "process_peers", "host_peers", "describe"}."""
    return _accl.group_layout(list(places))


@dataclasses.dataclass(frozen=True)
class Plan:
    """The runtime's plan of one call (xla_ffi/runtime/call_plan.h) and its predicted time."""

    schedule: str  # the algorithm over the whole group (hierarchical: by tiers)
    between: str  # hierarchical: the algorithm between hosts ("auto": none)
    chunks: int  # hierarchical: pipeline chunks
    protocol: str  # one_shot, whole, chunked or streamed
    predicted_s: float
    tiers: tuple  # hierarchical: ({"tier", "ranks", "owners", "via"[, "algorithm"]}, ...)
    layout: str  # the runtime's description of the group
    ranks: int
    hosts: int
    processes: int
    rails: int

    def summary(self) -> str:
        """One line: what runs, how, and its predicted time."""
        what = self.schedule
        if self.schedule == "hierarchical":
            what += " (" + " -> ".join(_tier_text(t) for t in self.tiers) + ")"
        return (
            f"{what}, {self.protocol}, {self.chunks} chunk{'s' if self.chunks > 1 else ''}, "
            f"predicted {self.predicted_s * 1e3:.3f} ms"
        )


def _tier_text(tier: Mapping) -> str:
    if tier["tier"] == "hosts":
        return f"{tier['ranks']} hosts, {tier['algorithm']}"
    return f"{tier['tier']} of {tier['ranks']}, {tier['owners']} owners"


def runtime_plan(
    places: Sequence[tuple[str, int]],
    nbytes: int,
    *,
    algorithm: str = "auto",
    cma: bool | None = None,
    rails: int = 1,
    rank: int = 0,
    one_shot: bool | None = None,
    chunks: int | None = None,
    between: str = "auto",
    model: Mapping[str, float] | None = None,
    fabric: Mapping[str, float] | None = None,
    collective: str = "all_reduce",
) -> Plan:
    """The plan the runtime makes for a call of `nbytes` per rank on the group at `places`.

    `cma` (default: JAX_ACCL_CMA) whether cross-memory attach is usable; `chunks`
    (default: JAX_ACCL_PIPELINE_CHUNKS) forces the pipeline's chunks; `one_shot` (default:
    the group is one process) whether the program runs in one process; `between` forces
    the algorithm between hosts (as the native tests do; the runtime always chooses);
    `model`: cost-model constants by name (``_accl.get_cost_model()``'s) that differ from
    the runtime's, for the choice and the prediction; `fabric`: constants for the
    prediction only (the network as it is, which the runtime's choice does not see);
    `collective`: all_reduce, reduce_scatter, all_gather or permute (`nbytes`: the input
    per rank)."""
    p = _accl.plan(
        list(places),
        int(nbytes),
        algorithm=algorithm,
        cma=config.value("JAX_ACCL_CMA") if cma is None else cma,
        rails=rails,
        rank=rank,
        one_shot=one_shot,
        chunks=config.value("JAX_ACCL_PIPELINE_CHUNKS") if chunks is None else chunks,
        between=between,
        model=dict(model or {}),
        fabric=dict(fabric or {}),
        collective=collective,
    )
    return Plan(**{**p, "tiers": tuple(p["tiers"])})


def cost_model() -> dict:
    """The runtime's cost-model constants by name (this process's: a stored calibration
    applies once the first call is lowered, or with jax_accl.cost_model.load(); in a job,
    process 0's from job start)."""
    return _accl.get_cost_model()


def link_constants(payload_gbps: float) -> dict:
    """The constants of a rail that carries `payload_gbps` Gbit/s of payload, as the cost
    model names them."""
    return {"net_beta": 8.0 / (payload_gbps * 1e9)}
