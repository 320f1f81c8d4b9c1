"""Which network interfaces ("rails") carry jax_accl's traffic between hosts.

``JAX_ACCL_RAILS``:
  * ``auto`` (default): every interface that is up, has an IPv4 address and is not
    loopback; loopback when there is none;
  * ``eth1,eth2``: these interfaces, in this order (the same names on every host, as on
    rail-optimised clusters);
  * ``eth1:3,eth2:1``: with weights, the share of each striped message a rail carries
    (for rails of different bandwidth; default 1 each).
"""

from __future__ import annotations

import fcntl
import socket
import struct

from jax_accl import config

SIOCGIFADDR = 0x8915


def interface_ipv4(name: str) -> str | None:
    """The IPv4 address of interface `name`, or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def _is_up(name: str) -> bool:
    try:
        with open(f"/sys/class/net/{name}/operstate") as f:
            return f.read().strip() in ("up", "unknown")
    except OSError:
        return False


def resolve(spec: str | None = None) -> list[tuple[str, str, float]]:
    """[(interface, IPv4 address, weight)] for the rails named by `spec` (JAX_ACCL_RAILS)."""
    spec = (spec if spec is not None else config.value("JAX_ACCL_RAILS")) or "auto"
    if spec == "auto":
        rails = [
            (name, ip, 1.0)
            for _, name in socket.if_nameindex()
            if name != "lo" and _is_up(name) and (ip := interface_ipv4(name))
        ]
        return rails or [("lo", "127.0.0.1", 1.0)]
    rails = []
    for item in spec.split(","):
        name, _, weight = item.strip().partition(":")
        ip = interface_ipv4(name)
        if ip is None:
            raise ValueError(
                f"JAX_ACCL_RAILS={spec!r}: interface {name!r} does not exist or "
                "has no IPv4 address on this host"
            )
        try:
            w = float(weight) if weight else 1.0
        except ValueError:
            w = float("nan")
        if not (0 < w <= 1e6):  # also refuses nan and inf
            raise ValueError(
                f"JAX_ACCL_RAILS={spec!r}: weight of {name!r} must be a positive number "
                f"(at most 1e6), got {weight!r}"
            )
        rails.append((name, ip, w))
    return rails
