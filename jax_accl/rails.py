"""Which network interfaces ("rails") carry jax_accl's traffic between hosts.

``JAX_ACCL_RAILS``:
  * ``auto`` (default): every interface that is up, has an IPv4 address and is not
    loopback; loopback when there is none;
  * ``eth1,eth2``: these interfaces, in this order (the same names on every host, as on
    rail-optimised clusters);
  * ``eth1:3,eth2:1``: with weights, the share of each striped message a rail carries
    (for rails of different bandwidth; default 1 each).

``JAX_ACCL_RAIL_CHOICE`` (paying(), process 0's): with ``model`` (default) and process 0's wire
calibration of as many rails, a job whose rails together carried less than
RAILS_PAY_MIN x one rail's stripes over the first only: on a fast wire whose limit is the
hosts' CPUs, a second connection per peer adds work and no bandwidth.
"""

from __future__ import annotations

import fcntl
import socket
import struct

from jax_accl import config

SIOCGIFADDR = 0x8915
# Rails pay where together they carry at least this much more than one (else the extra
# rails' connections only add sends, receives and their cores' time to every message).
RAILS_PAY_MIN = 1.15


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


def paying_count(count: int, wire: dict | None, choice: str | None = None) -> int:
    """How many of `count` rails a job stripes over (the first ones): all, unless `choice`
    (process 0's JAX_ACCL_RAIL_CHOICE; None: this process's) is model and `wire` (process
    0's calibration, jax_accl.cost_model) measured as many rails carrying together under
    RAILS_PAY_MIN x one rail's: then 1."""
    choice = choice if choice is not None else config.value("JAX_ACCL_RAIL_CHOICE")
    if choice != "model" or wire is None or count < 2:
        return count
    if wire["rails"] != count or rails_gain(wire) >= RAILS_PAY_MIN:
        return count
    return 1


def rails_gain(wire: dict) -> float:
    """What a wire calibration's rails carried together, in units of one rail's."""
    return wire["all_rails_bytes_per_s"] / wire["one_rail_bytes_per_s"]


def paying(rails: list, wire: dict | None, choice: str | None = None) -> tuple[list, str]:
    """(the rails a job stripes over, why where not all of `rails`: "" otherwise)."""
    used = paying_count(len(rails), wire, choice)
    if used == len(rails):
        return rails, ""
    return rails[:used], (
        f"the {len(rails)} rails together carried {rails_gain(wire):.2f}x one rail's in the "
        f"stored wire calibration (under {RAILS_PAY_MIN}x): striping over {rails[0][0]} only "
        "(JAX_ACCL_RAIL_CHOICE=all stripes over every rail)"
    )
