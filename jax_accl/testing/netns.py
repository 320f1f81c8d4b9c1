"""Virtual hosts for multi-host tests: network namespaces joined by one bridge per rail.

    switch namespace:  br0 (rail 0)         br1 (rail 1)       ...
                        |  |  |              |  |  |
    host h namespace:  rail0 = 10.90.0.(h+1)  rail1 = 10.91.0.(h+1)

Each host gets one veth pair per rail (its end named rail<r>, its own /24 per rail);
`tc tbf` on every host's rail shapes its egress, so the links are the bottleneck.
Everything lives inside namespaces created here and is deleted on exit; no traffic
leaves them. Needs root (CI runs as root).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True)


def rail_ip(host: int, rail: int) -> str:
    return f"10.{90 + rail}.0.{host + 1}"


def stated_wire(rate_mbit: float | None, mtu: int = 1500) -> dict:
    """The environment that tells a job's runtime the wire virtual_hosts shapes its rails
    to (JAX_ACCL_LINK_GBITS, their payload rate), so it plans for it; nothing unshaped."""
    if not rate_mbit:
        return {}
    from jax_accl.plan.topology import payload_share

    return {"JAX_ACCL_LINK_GBITS": f"{rate_mbit * payload_share(mtu) / 1e3:g}"}


@contextlib.contextmanager
def virtual_hosts(hosts: int, rails: int, rate_mbit: float | None = None, mtu: int = 1500):
    """Yields the namespace name of every host. `mtu`: of every rail and switch port (9000:
    jumbo frames, as clusters use; the simulated wire then costs the CPU the hosts share
    about a sixth of its packets). NETNS_PREFIX in the environment starts every name."""
    tag = uuid.uuid4().hex[:6]
    prefix = os.environ.get("NETNS_PREFIX", "")  # e.g. a branch's name, on a shared machine
    switch = f"{prefix}accl-sw-{tag}"
    names = [f"{prefix}accl-h{h}-{tag}" for h in range(hosts)]
    created = []
    try:
        for ns in [switch, *names]:
            sh("ip", "netns", "add", ns)
            created.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        # The switch is a plain layer-2 bridge: no netfilter on the frames it forwards
        # (where the kernel passes bridged traffic through iptables, that costs every
        # packet CPU that the simulated hosts share with the job).
        for table in ("iptables", "ip6tables", "arptables"):
            subprocess.run(
                [
                    "ip",
                    "netns",
                    "exec",
                    switch,
                    "sysctl",
                    "-qw",
                    f"net.bridge.bridge-nf-call-{table}=0",
                ],
                capture_output=True,
            )
        for r in range(rails):
            sh("ip", "-n", switch, "link", "add", f"br{r}", "type", "bridge")
            sh("ip", "-n", switch, "link", "set", f"br{r}", "up")
            for h, ns in enumerate(names):
                port = f"h{h}r{r}"
                sh(
                    "ip",
                    "-n",
                    switch,
                    "link",
                    "add",
                    port,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    f"rail{r}",
                    "netns",
                    ns,
                )
                sh("ip", "-n", switch, "link", "set", port, "master", f"br{r}")
                sh("ip", "-n", switch, "link", "set", port, "mtu", str(mtu), "up")
                sh("ip", "-n", ns, "link", "set", f"rail{r}", "mtu", str(mtu))
                sh("ip", "-n", ns, "addr", "add", f"{rail_ip(h, r)}/24", "dev", f"rail{r}")
                sh("ip", "-n", ns, "link", "set", f"rail{r}", "up")
                if rate_mbit:
                    sh(
                        "ip",
                        "netns",
                        "exec",
                        ns,
                        "tc",
                        "qdisc",
                        "add",
                        "dev",
                        f"rail{r}",
                        "root",
                        "tbf",
                        "rate",
                        f"{rate_mbit}mbit",
                        "burst",
                        "64kb",
                        "latency",
                        "100ms",
                    )
        yield names
    finally:
        for ns in reversed(created):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def cut_cable(names: list[str], host: int, rail: int) -> None:
    """Pulls host `host`'s cable on rail `rail` (of `virtual_hosts`' `names`): its switch
    port goes down, so its packets on that rail vanish both ways, with no reset and no
    error for either end, as when a cable is cut or a host loses power."""
    switch = names[host].replace(f"accl-h{host}-", "accl-sw-", 1)
    sh("ip", "-n", switch, "link", "set", f"h{host}r{rail}", "down")


def drop_connections(names: list[str], host: int, rail: int, ports: tuple[int, int]) -> None:
    """A firewall on host `host`'s rail `rail`: every TCP connection request (SYN without
    ACK) it sends to the ports `ports` (first, last: an aligned power-of-two block)
    vanishes unanswered; the rest passes unshaped. In the host's namespace, gone with it:
    an htb root whose filter puts those packets in a class with a zero-length queue."""
    first, last = ports
    size = last - first + 1
    assert size & (size - 1) == 0 and first % size == 0, ports
    dev = f"rail{rail}"
    tc = ["ip", "netns", "exec", names[host], "tc"]
    sh(*tc, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1")
    sh(*tc, "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", "10gbit")
    sh(*tc, "class", "add", "dev", dev, "parent", "1:", "classid", "1:2", "htb", "rate", "1mbit")
    sh(*tc, "qdisc", "add", "dev", dev, "parent", "1:2", "pfifo", "limit", "0")
    sh(
        *tc,
        *("filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32"),
        *("match", "ip", "protocol", "6", "0xff"),
        *("match", "ip", "dport", str(first), hex(0xFFFF & ~(size - 1))),
        *("match", "u8", "0x02", "0x12", "at", "33"),  # flags: SYN set, ACK clear
        *("flowid", "1:2"),
    )


def can_create_namespaces() -> bool:
    return os.geteuid() == 0
