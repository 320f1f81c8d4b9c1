"""The wire as iperf3 (Debian's package) sees it between two namespaced hosts: host 0
sends to host 1 on rail0 over 1 TCP flow and over several at once (-P), which tells a
wire capped per flow (jax_accl.testing.netns.cap_each_flow) from one a single flow fills."""

from __future__ import annotations

import json
import shutil
import subprocess
import time

from jax_accl.testing import netns


def rates(names: list[str], flows=(1, 4), seconds: float = 3.0) -> dict[int, float]:
    """{flows: bits/s host 1 received}, one iperf3 run per count; {} without iperf3."""
    if shutil.which("iperf3") is None:
        return {}
    server_ip, out = netns.rail_ip(1, 0), {}
    for count in flows:
        server = subprocess.Popen(
            ["ip", "netns", "exec", names[1], "iperf3", "-s", "-1", "-B", server_ip],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            for _ in range(50):  # the server listening: its port answers
                probe = subprocess.run(
                    ["ip", "netns", "exec", names[1], "ss", "-ltn", "sport", "= :5201"],
                    capture_output=True,
                    text=True,
                )
                if ":5201" in probe.stdout:
                    break
                time.sleep(0.1)
            client = subprocess.run(
                ["ip", "netns", "exec", names[0], "iperf3", "-c", server_ip]
                + ["-B", netns.rail_ip(0, 0), "-t", f"{seconds:g}", "-P", str(count), "-J"],
                capture_output=True,
                text=True,
                timeout=seconds + 30,
            )
            out[count] = json.loads(client.stdout)["end"]["sum_received"]["bits_per_second"]
        finally:  # a server whose client never came (or failed) is ended, not left behind
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    return out


def describe(measured: dict[int, float]) -> str:
    if not measured:
        return "iperf3 is not installed (apt-get install iperf3)"
    return "iperf3 host 0 to host 1 on rail0: " + ", ".join(
        f"-P {count}: {bps / 1e6:.0f} Mbit/s" for count, bps in measured.items()
    )
