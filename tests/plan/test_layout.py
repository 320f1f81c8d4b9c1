"""The planner's tiers (jax_accl.plan.group_layout, the runtime's topology/group_layout
through the binding) against the rules group_layout.h states, written out independently
here: the same groups and owners for every layout."""

import pytest

from jax_accl import _accl
from jax_accl import plan as layout

LAYOUTS = [
    [[2], [2]],
    [[1, 1], [1, 1]],
    [[1, 1], [1, 1], [1, 1]],
    [[2, 2], [2, 2]],
    [[2, 1], [2], [1]],
    [[3], [1, 1]],
    [[1, 2, 1]],
    [[4, 4], [4, 4], [4, 4]],
    [[1]],
    [[8]] * 5,
]


def reference_layout(places):
    """The tiers as topology/group_layout.h describes them: hosts in order of their first
    rank, a host's processes likewise, a process's ranks in rank order; the first
    thread_owners (the fewest devices any process has) devices of a process and the first
    process_owners (the fewest processes any host has) processes of a host own a slice."""
    at, host_index, process_index, where = [], {}, {}, []
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


@pytest.mark.parametrize("per_host", LAYOUTS, ids=str)
def test_group_layout_equals_the_runtime(per_host):
    places = layout.places_of(per_host)
    native = _accl.group_layout(places)
    assert layout.group_layout(places) == native
    native.pop("describe")
    assert reference_layout(places) == native


def test_interleaved_ranks_and_one_process_on_two_hosts():
    places = [("a", 0), ("b", 1), ("a", 0), ("b", 1)]
    assert reference_layout(places) == {
        k: v for k, v in layout.group_layout(places).items() if k != "describe"
    }
    with pytest.raises(ValueError, match="placed on hosts"):
        reference_layout([("a", 0), ("b", 0)])
    with pytest.raises(ValueError, match="placed on hosts"):
        layout.group_layout([("a", 0), ("b", 0)])
