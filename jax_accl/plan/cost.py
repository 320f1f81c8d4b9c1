"""Predicted all-reduce time on a topology, from the alpha-beta constants the runtime's
cost model uses (xla_ffi/algorithms/select.h): a step costs alpha, a byte moved costs
beta (memory inside a host, the rail's rate between hosts), a byte reduced gamma.
S is the buffer per device, N = hosts x devices, B the bytes per second of one rail."""

from __future__ import annotations

import dataclasses
import math

from jax_accl.plan.schedule import power_below
from jax_accl.plan.topology import Topology

ALGORITHMS = (
    "flat ring",
    "flat halving_doubling",
    "hierarchical ring",
    "hierarchical halving_doubling",
    "hierarchical ring pipelined",
)


@dataclasses.dataclass(frozen=True)
class Constants:
    alpha_mem_s: float = 40e-6
    beta_mem_s_per_byte: float = 1 / 10e9
    gamma_s_per_byte: float = 1 / 10e9
    alpha_net_s: float = 60e-6

    @classmethod
    def from_runtime(cls) -> Constants:
        from jax_accl import _accl

        c = _accl.get_cost_model()
        return cls(c["alpha"], c["beta"], c["gamma"], c["net_alpha"])


def _local_phases(t: Topology, size: float, c: Constants) -> tuple[float, float]:
    """Reduce-scatter and all-gather among the devices of one host, which share its
    memory (or intra-host link) bandwidth: the reduce-scatter reads every device's
    buffer once and writes one buffer ((d+1)·S bytes; the adds hide under the reads); the
    all-gather copies (d-1) slices into every device (2(d-1)·S bytes)."""
    d = t.devices_per_host
    if d == 1:
        return 0.0, 0.0
    return (
        c.alpha_mem_s + (d + 1) * size * c.beta_mem_s_per_byte,
        c.alpha_mem_s + 2 * (d - 1) * size * c.beta_mem_s_per_byte,
    )


def _inter(t: Topology, inner: str, size: float, c: Constants) -> float:
    """All-reduce of `size` bytes per device among the hosts, every slice at once, slices
    sharing a rail when there are more devices than rails."""
    h = t.hosts
    if h == 1:
        return 0.0
    per_rail = math.ceil(t.devices_per_host / t.rails)
    b = t.link_bytes_per_s / per_rail  # each slice's share of its rail
    if inner == "ring":
        return (
            2 * (h - 1) * (c.alpha_net_s + size / h / b) + (h - 1) / h * size * c.gamma_s_per_byte
        )
    p = power_below(h)
    fold = 2 * (c.alpha_net_s + size / b) + size * c.gamma_s_per_byte if p != h else 0.0
    return (
        2 * math.log2(p) * c.alpha_net_s
        + 2 * (p - 1) / p * size / b
        + (p - 1) / p * size * c.gamma_s_per_byte
        + fold
    )


def predict_seconds(
    t: Topology, algorithm: str, size: float, c: Constants, pipeline_chunks: int = 8
) -> float:
    n, d = t.ranks, t.devices_per_host
    if algorithm == "flat ring":
        if t.hosts == 1:
            return (
                2 * (n - 1) * (c.alpha_mem_s + size / n * c.beta_mem_s_per_byte)
                + (n - 1) / n * size * c.gamma_s_per_byte
            )
        # The ring crosses every host boundary on one rail: that link sets the pace.
        return (
            2 * (n - 1) * (c.alpha_net_s + size / n / t.link_bytes_per_s)
            + (n - 1) / n * size * c.gamma_s_per_byte
        )
    if algorithm == "flat halving_doubling":
        p = power_below(n)
        total, chunk = 0.0, size
        mask = p // 2
        while mask >= 1:  # reduce-scatter levels; all-gather mirrors them
            chunk /= 2
            if mask < d:  # partners inside a host
                step = c.alpha_mem_s + chunk * c.beta_mem_s_per_byte
            else:  # every device of the host on rail 0 at once
                step = c.alpha_net_s + d * chunk / t.link_bytes_per_s
            total += 2 * step + chunk * c.gamma_s_per_byte
            mask //= 2
        if p != n:
            total += 2 * (c.alpha_net_s + d * size / t.link_bytes_per_s)
        return total
    inner = algorithm.split(" ")[1]  # "hierarchical <inner>", maybe " pipelined"
    rs, ag = _local_phases(t, size, c)
    inter = _inter(t, inner, size / d, c)
    if algorithm.endswith("pipelined"):
        # Chunks flow through the three phases like a pipeline: the slowest phase sets
        # the pace, the others add one chunk's worth each, plus a step per extra chunk.
        phases = [rs, inter, ag]
        k = pipeline_chunks
        return max(phases) + (sum(phases) - max(phases)) / k + (k - 1) * c.alpha_net_s
    return rs + inter + ag


def busbw(t: Topology, size: float, seconds: float) -> float:
    n = t.ranks
    return size / seconds * 2 * (n - 1) / n if n > 1 else 0.0
