"""Run schedules: symbolically (which ranks' contributions each chunk holds), on NumPy
data, and on a fabric (how many flows share each link in each step)."""

from __future__ import annotations

import collections

import numpy as np

from jax_accl.plan.schedule import Schedule
from jax_accl.plan.topology import Topology, path


def run_symbolic(schedule: Schedule) -> list[list[collections.Counter]]:
    """state[rank][chunk]: a multiset of the ranks whose input it contains. Steps are
    simultaneous: every transfer reads the values from before its step."""
    state = [
        [collections.Counter({r: 1}) for _ in range(schedule.chunks)] for r in range(schedule.ranks)
    ]
    for step in schedule.steps:
        before = {(t.src, t.chunk): state[t.src][t.chunk] for t in step}
        for t in step:
            value = before[(t.src, t.chunk)]
            state[t.dst][t.chunk] = state[t.dst][t.chunk] + value if t.reduce else value.copy()
    return state


def check_symbolic(schedule: Schedule) -> list[str]:
    """Problems: a chunk missing a contribution or holding one twice (reduced twice)."""
    everyone = collections.Counter(range(schedule.ranks))
    problems = []
    for r, chunks in enumerate(run_symbolic(schedule)):
        for c, got in enumerate(chunks):
            if got != everyone:
                twice = sorted(k for k, v in got.items() if v > 1)
                lost = sorted(set(range(schedule.ranks)) - set(got))
                problems.append(f"rank {r} chunk {c}: missing {lost[:5]}, twice {twice[:5]}")
    return problems


def run_numeric(schedule: Schedule, inputs: np.ndarray) -> np.ndarray:
    """inputs[rank] (chunks x k values) -> every rank's result, summing in schedule order."""
    state = inputs.astype(np.float64).copy()
    for step in schedule.steps:
        before = {(t.src, t.chunk): state[t.src, t.chunk].copy() for t in step}
        for t in step:
            value = before[(t.src, t.chunk)]
            state[t.dst, t.chunk] = state[t.dst, t.chunk] + value if t.reduce else value
    return state


def link_load(topology: Topology, flows) -> collections.Counter:
    """Flows per directed network link for one step of (src_host, dst_host, rail) flows.
    Streams between the same two hosts on the same rail count as one flow."""
    load = collections.Counter()
    for src, dst, rail in set(flows):
        for link in path(topology, src, dst, rail):
            if link[0] != "memory":
                load[link] += 1
    return load


def contention(topology: Topology, steps) -> list[tuple[int, tuple, int]]:
    """(step, link, flows) for every link that carries more than one flow in a step."""
    found = []
    for k, flows in enumerate(steps):
        for link, n in link_load(topology, flows).items():
            if n > 1:
                found.append((k, link, n))
    return found
