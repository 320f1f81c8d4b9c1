"""A group's tiers as the runtime derives them (xla_ffi/topology/group_layout.h, mirrored
here and compared by the tests): devices of a process, processes of a host, hosts.

A group's hosts are in order of their first rank, a host's processes likewise, a
process's ranks in rank order; rank at[h][j][t] is device t of process j of host h.
  * tier 0: the ranks of one process; the first ``thread_owners`` (the fewest devices any
    process has) own a slice each;
  * tier 1: device t of every process of a host; the first ``process_owners`` (the fewest
    processes any host has) own a sub-slice each;
  * between hosts: device t of process j of every host, in host order, each slice
    striped over every rail.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence


def group_layout(places: Sequence[tuple[str, int]]) -> dict:
    """places[r] = (host, process) of rank r -> the tiers, in the native binding's form
    (jax_accl._accl_testing.group_layout)."""
    if not places:
        raise ValueError("a group needs at least one rank")
    at: list[list[list[int]]] = []
    host_index: dict[str, int] = {}
    process_index: dict[int, tuple[int, int]] = {}
    where = []
    for rank, (host, process) in enumerate(places):
        h = host_index.setdefault(host, len(at))
        if h == len(at):
            at.append([])
        if process not in process_index:
            process_index[process] = (h, len(at[h]))
            at[h].append([])
        elif process_index[process][0] != h:
            raise ValueError(f"process {process} is placed on hosts {host} and another")
        j = process_index[process][1]
        where.append((h, j, len(at[h][j])))
        at[h][j].append(rank)
    thread_owners = min(len(p) for host in at for p in host)
    process_owners = min(len(host) for host in at)

    def owns(r):
        return where[r][2] < thread_owners and where[r][1] < process_owners

    return {
        "hosts": [sorted(r for p in host for r in p) for host in at],
        "thread_owners": thread_owners,
        "process_owners": process_owners,
        "process_peers": [[p[t] for p in at[h]] if t < thread_owners else [] for h, j, t in where],
        "host_peers": [
            [host[j][t] for host in at] if owns(r) else [] for r, (h, j, t) in enumerate(where)
        ],
    }


def places_of(per_host: Sequence[Sequence[int]]) -> list[tuple[str, int]]:
    """(host, process) of every rank of a layout given per host as the device counts of
    its processes ([[2], [1, 1]]: host 0 one process of 2 devices, host 1 two of 1),
    ranks numbered host by host, process by process."""
    places, process = [], 0
    for h, host in enumerate(per_host):
        for devices in host:
            places += [(f"host{h}", process)] * devices
            process += 1
    return places
