"""All-reduce schedules, explicit: the buffer is cut into `chunks` equal chunks; a step
is a set of simultaneous transfers, each moving one chunk from one rank to another and
either reducing it into the receiver's copy or replacing it. Ranks are global device
ranks; rank r lives on host r // devices_per_host, as local device r % devices_per_host.

  ring(ranks)                 reduce-scatter then all-gather around the ring, 2(n-1) steps
  halving_doubling(ranks)     fold to a power of two p, recursive halving, recursive
                              doubling, unfold; 2·log2(p) (+2) steps
  direct(ranks)               every rank sends its buffer to every other: one step
  hierarchical(topology, inner)
                              1. local reduce-scatter: device i of every host gathers
                                 slice i from the host's other devices (memory);
                                 2. for every slice i at once, the inner algorithm among
                                 the hosts' device i, striped over every rail (one
                                 part per rail);
                                 3. local all-gather (memory).
Explicit schedules are for small shapes (the simulator runs them symbolically);
`network_steps` lists, at any scale, the distinct flow patterns between hosts.
"""

from __future__ import annotations

import dataclasses

from jax_accl.plan.topology import Topology


@dataclasses.dataclass(frozen=True)
class Transfer:
    src: int
    dst: int
    chunk: int
    reduce: bool  # dst = dst op src (else dst = src)
    rail: int = -1  # -1: inside a host (memory)


@dataclasses.dataclass
class Schedule:
    name: str
    ranks: int
    chunks: int
    steps: list[list[Transfer]]


def ring(
    ranks: list[int], *, chunk_base: int = 0, rail: int = -1, host_of=lambda r: r
) -> list[list[Transfer]]:
    n = len(ranks)
    steps = []

    def rail_for(a, b):
        return rail if host_of(a) != host_of(b) else -1

    for s in range(n - 1):  # reduce-scatter
        steps.append(
            [
                Transfer(
                    ranks[i],
                    ranks[(i + 1) % n],
                    chunk_base + (i - s) % n,
                    True,
                    rail_for(ranks[i], ranks[(i + 1) % n]),
                )
                for i in range(n)
            ]
        )
    for s in range(n - 1):  # all-gather
        steps.append(
            [
                Transfer(
                    ranks[i],
                    ranks[(i + 1) % n],
                    chunk_base + (i + 1 - s) % n,
                    False,
                    rail_for(ranks[i], ranks[(i + 1) % n]),
                )
                for i in range(n)
            ]
        )
    return steps


def ring_chunks(n: int) -> int:
    return n


def power_below(n: int) -> int:
    p = 1
    while p * 2 <= n:
        p *= 2
    return p


def halving_doubling(
    ranks: list[int], *, chunk_base: int = 0, rail: int = -1, host_of=lambda r: r
) -> list[list[Transfer]]:
    """Over p = power_below(n) chunks; rank p + j first folds into rank j (the runtime's
    rank mapping: ranks 0..p-1 keep their order, which keeps a fat tree contention-free)."""
    n = len(ranks)
    p = power_below(n)
    extra = n - p

    def t(a, b, chunk, reduce):
        return Transfer(
            ranks[a],
            ranks[b],
            chunk_base + chunk,
            reduce,
            rail if host_of(ranks[a]) != host_of(ranks[b]) else -1,
        )

    real = list(range(p))
    steps = []
    if extra:
        steps.append([t(p + j, j, c, True) for j in range(extra) for c in range(p)])
    windows = [(0, p) for _ in range(p)]
    mask = p // 2
    while mask >= 1:
        step, new = [], []
        for v in range(p):
            lo, hi = windows[v]
            mid = (lo + hi) // 2
            keep, give = ((lo, mid), (mid, hi)) if v & mask == 0 else ((mid, hi), (lo, mid))
            step += [t(real[v], real[v ^ mask], c, True) for c in range(*give)]
            new.append(keep)
        steps.append(step)
        windows = new
        mask //= 2
    mask = 1
    while mask < p:
        step = []
        for v in range(p):
            step += [t(real[v], real[v ^ mask], c, False) for c in range(*windows[v])]
        windows = [
            (min(windows[v][0], windows[v ^ mask][0]), max(windows[v][1], windows[v ^ mask][1]))
            for v in range(p)
        ]
        steps.append(step)
        mask *= 2
    if extra:
        steps.append([t(j, p + j, c, False) for j in range(extra) for c in range(p)])
    return steps


def hd_chunks(n: int) -> int:
    return power_below(n)


def direct(
    ranks: list[int], *, chunk_base: int = 0, rail: int = -1, host_of=lambda r: r
) -> list[list[Transfer]]:
    """One step: every rank sends its one chunk to every other, which reduces them all."""
    return [
        [
            Transfer(a, b, chunk_base, True, rail if host_of(a) != host_of(b) else -1)
            for a in ranks
            for b in ranks
            if a != b
        ]
    ]


def direct_chunks(n: int) -> int:
    return 1


INNER = {
    "ring": (ring, ring_chunks),
    "halving_doubling": (halving_doubling, hd_chunks),
    "direct": (direct, direct_chunks),
}


def flat(topology: Topology, inner: str) -> Schedule:
    make, chunks = INNER[inner]
    d = topology.devices_per_host
    ranks = list(range(topology.ranks))
    steps = make(ranks, rail=0, host_of=lambda r: r // d)
    return Schedule(f"flat {inner}", topology.ranks, chunks(topology.ranks), steps)


def slice_parts(topology: Topology) -> list[tuple[int, int]]:
    """(slice, rail) of every part that travels between hosts: slice i (owned by local
    device i) striped over every rail, one part per rail, as the runtime sends it."""
    return [(i, rail) for i in range(topology.devices_per_host) for rail in range(topology.rails)]


def hierarchical(topology: Topology, inner: str) -> Schedule:
    make, chunks_of = INNER[inner]
    h, d = topology.hosts, topology.devices_per_host
    per_part = chunks_of(h)
    parts = slice_parts(topology)
    chunks = len(parts) * per_part
    steps = []
    local_rs, local_ag = [], []
    for host in range(h):
        for k, (i, _) in enumerate(parts):  # slice i is owned by local device i
            for j in range(d):
                if i == j:
                    continue
                for c in range(per_part):
                    chunk = k * per_part + c
                    local_rs.append(Transfer(host * d + j, host * d + i, chunk, True))
                    local_ag.append(Transfer(host * d + i, host * d + j, chunk, False))
    if d > 1:
        steps.append(local_rs)
    inter = [
        make(
            [host * d + i for host in range(h)],
            chunk_base=k * per_part,
            rail=rail,
            host_of=lambda r: r // d,
        )
        for k, (i, rail) in enumerate(parts)
    ]
    for k in range(max(len(s) for s in inter)):  # every part's step k at once
        steps.append([t for s in inter if k < len(s) for t in s[k]])
    if d > 1:
        steps.append(local_ag)
    return Schedule(f"hierarchical {inner}", topology.ranks, chunks, steps)


def network_steps(topology: Topology, algorithm: str):
    """The distinct patterns of flows between hosts, (src_host, dst_host, rail) per flow,
    at any scale: one step per halving-doubling level, and one representative step for
    a ring (every ring step has the same pattern) and for direct (every pair at once)."""
    h, d = topology.hosts, topology.devices_per_host
    kind, inner = algorithm.split(" ")
    if kind == "flat":
        n = topology.ranks
        if inner == "direct":
            return [
                sorted(
                    {(a // d, b // d, 0) for a in range(n) for b in range(n) if a // d != b // d}
                )
            ]
        if inner == "ring":
            return [[(r // d, (r + 1) % n // d, 0) for r in range(n) if r // d != (r + 1) % n // d]]
        pairs = _hd_pairs(n)
        return [[(a // d, b // d, 0) for a, b in step if a // d != b // d] for step in pairs]
    # The parts of all slices between one pair of hosts on one rail share its path: one
    # flow of that host pair (the same bytes per link as one slice per rail would be).
    rails = range(topology.rails)
    if inner == "direct":
        return [sorted({(a, b, r) for r in rails for a in range(h) for b in range(h) if a != b})]
    if inner == "ring":
        return [
            sorted({(host, (host + 1) % h, rail) for rail in rails for host in range(h) if h > 1})
        ]
    return [sorted({(a, b, rail) for rail in rails for a, b in step}) for step in _hd_pairs(h)]


def _hd_pairs(n: int) -> list[list[tuple[int, int]]]:
    """(src, dst) positions of every halving-doubling step among n ranks (fold included)."""
    p = power_below(n)
    extra = n - p
    real = list(range(p))
    steps = []
    if extra:
        steps.append([(p + j, j) for j in range(extra)])
    masks = []
    m = p // 2
    while m >= 1:
        masks.append(m)
        m //= 2
    for m in masks + masks[::-1]:
        steps.append([(real[v], real[v ^ m]) for v in range(p)])
    if extra:
        steps.append([(j, p + j) for j in range(extra)])
    return steps
