"""Cluster topologies as data: hosts x devices per host (in one process or several) x
rails, and the switch fabric that joins the hosts' rails. Pure: no I/O.

Fabrics (every rail has its own copy of the fabric, as on rail-optimised clusters, so
flows on different rails never share a link):
  * ``fat_tree``: two tiers. Leaf switches of `hosts_per_leaf` hosts; every leaf has one
    uplink to each of `hosts_per_leaf` spines (full bisection). A flow between leaves
    goes up to the spine numbered by the source host's position in its leaf
    (deterministic, like ECMP keyed on the source port).
  * ``bigraph``: two layers of switches (EFLOPS, HPCA 2020); every switch of one layer
    links to every switch of the other, hosts hang off switches of both layers. Hosts
    under switches of different layers are one switch hop apart; hosts under two
    switches of one layer go through a switch of the other layer, chosen by the source
    host's position.
A link is a hashable tuple; `path()` lists the directed links a flow crosses.
"""

from __future__ import annotations

import dataclasses

FABRICS = ("fat_tree", "bigraph")


def payload_share(mtu: int = 1500) -> float:
    """The share of a rail's line rate that carries payload: TCP over IPv4 with
    timestamps in Ethernet frames of `mtu` bytes, each carrying mtu - 52 bytes of payload
    and taking mtu + 38 bytes of the wire (header 14, FCS 4, preamble 8, gap 12)."""
    return (mtu - 52) / (mtu + 38)


@dataclasses.dataclass(frozen=True)
class Topology:
    hosts: int
    devices_per_host: int
    rails: int
    link_gbps: float = 100.0  # per rail and direction
    fabric: str = "fat_tree"
    hosts_per_leaf: int = 32  # hosts under one switch
    processes_per_host: int = 1  # the host's devices split evenly among them

    def __post_init__(self):
        counts = (self.hosts, self.devices_per_host, self.rails, self.hosts_per_leaf)
        if min(counts + (self.processes_per_host,)) < 1:
            raise ValueError(f"every count of {self} must be >= 1")
        if self.devices_per_host % self.processes_per_host:
            raise ValueError(f"{self}: the processes of a host must hold its devices evenly")
        if self.fabric not in FABRICS:
            raise ValueError(f"fabric must be one of {FABRICS}, got {self.fabric!r}")

    def layout(self) -> list[list[int]]:
        """Per host, the devices of each of its processes (jax_accl.plan.runtime)."""
        per_process = self.devices_per_host // self.processes_per_host
        return [[per_process] * self.processes_per_host for _ in range(self.hosts)]

    @property
    def ranks(self) -> int:
        return self.hosts * self.devices_per_host

    @property
    def link_bytes_per_s(self) -> float:
        return self.link_gbps * 1e9 / 8

    def switch_of(self, host: int) -> int:
        return host // self.hosts_per_leaf

    @property
    def switches(self) -> int:
        return -(-self.hosts // self.hosts_per_leaf)


def path(topology: Topology, src_host: int, dst_host: int, rail: int) -> list[tuple]:
    """The directed links a flow from src_host to dst_host on `rail` crosses."""
    if src_host == dst_host:
        return [("memory", src_host)]
    up, down = ("host-up", rail, src_host), ("host-down", rail, dst_host)
    a, b = topology.switch_of(src_host), topology.switch_of(dst_host)
    if a == b:
        return [up, down]
    position = src_host % topology.hosts_per_leaf
    if topology.fabric == "fat_tree":
        spine = position
        return [up, ("leaf-spine", rail, a, spine), ("spine-leaf", rail, spine, b), down]
    # bigraph: switches 0..K-1 form layer 0, K..2K-1 layer 1 (K = half, rounded up).
    half = -(-topology.switches // 2)
    layer_a, layer_b = a >= half, b >= half
    if layer_a != layer_b:
        return [up, ("switch-switch", rail, a, b), down]
    other = [s for s in range(topology.switches) if (s >= half) != layer_a]
    middle = other[position % len(other)]
    return [up, ("switch-switch", rail, a, middle), ("switch-switch", rail, middle, b), down]
