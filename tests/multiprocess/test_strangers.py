"""The job's network misbehaves. A stranger, from a namespace of its own on both rails,
opens 2,000 connections to a process's listeners while the job runs (silent ones,
garbage, other protocols, well-formed hellos that cannot prove the secret): every one is
refused, and every all-reduce of the job meanwhile is exact. A cable is cut mid-job:
the peers notice within seconds (TCP keepalive, unanswered retransmissions), not at the call's
deadline."""

import json
import subprocess
import sys
import threading
import time

import pytest

from jax_accl.testing import launch, netns

WORKER = launch.WORKER


class BackgroundJob:
    """A 2-process job (one device each) on namespaced hosts `hosts`, running `scenario`
    of the worker in a thread, so that the test can act on the network meanwhile."""

    def __init__(self, scenario, hosts, tmp_path, env=None):
        self.results, self.failure, self.signals = [], [], tmp_path
        command = [*WORKER, "--scenario", scenario, "--reference", "numpy"]
        command += ["--signal-dir", str(tmp_path)]
        environment = [
            {"JAX_ACCL_HOST_ID": n, "JAX_ACCL_RAILS": "rail0,rail1", **(env or {})} for n in hosts
        ]

        def run():
            try:
                self.results.extend(
                    launch.run_job(
                        command,
                        2,
                        1,
                        env=environment,
                        namespaces=hosts,
                        coordinator_ip=netns.rail_ip(0, 0),
                        timeout=400,
                    )
                )
            except Exception as e:  # reported by the test, after the network is put back
                self.failure.append(e)

        self.thread = threading.Thread(target=run)
        self.thread.start()

    def ports(self):
        """The listeners process 0 announced (ports.json), once the job runs."""
        path = self.signals / "ports.json"
        deadline = time.time() + 120
        while not path.exists() and self.thread.is_alive() and time.time() < deadline:
            time.sleep(0.1)
        assert path.exists(), self.failure
        return path

    def join(self):
        self.thread.join(timeout=300)


CONNECTIONS = 2000

# Runs inside the stranger's namespace: argv[1] is the listeners' JSON [[ip, port], ...].
STRANGER = r"""
import json, os, socket, struct, sys, time
from concurrent.futures import ThreadPoolExecutor
listeners = json.loads(sys.argv[1])
count = int(sys.argv[2])
hello = struct.Struct("<IIqqIIdQ16s")
def payload(i):
    kind = i % 5
    if kind == 0:
        return b""  # silent: holds its connection open a while
    if kind == 1:
        return os.urandom(64)
    if kind == 2:
        return b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    # well-formed hellos (current and older protocol) with a made-up response
    return hello.pack(0x4C434341, 3 if kind == 3 else 2, 1, 0, 0, i, 1.0, i, os.urandom(16))
def one(i):
    ip, port = listeners[i % len(listeners)]
    for attempt in range(50):
        try:
            s = socket.create_connection((ip, port), timeout=10)
        except OSError:  # not even connected: try again
            time.sleep(0.05)
            continue
        with s:
            try:  # connected: whatever the listener does with it now, it was made
                data = payload(i)
                if data:
                    s.sendall(data)
                    if len(data) == hello.size:
                        s.recv(48)  # the challenge: answer it with garbage
                        s.sendall(os.urandom(32))
                        s.recv(1)
                else:
                    time.sleep(0.5)
            except OSError:  # closed unread or reset by the listener
                pass
        return True
    return False
with ThreadPoolExecutor(32) as pool:
    made = sum(pool.map(one, range(count)))
print(made)
"""


@pytest.mark.timeout(900)  # the flood's 300 s and the job's join, 300 s, past the default
def test_two_thousand_stranger_connections_are_refused_while_the_job_runs_exact(
    root_required, tmp_path
):
    with netns.virtual_hosts(3, 2) as names:
        stranger = names[2]
        job = BackgroundJob("siege", names[:2], tmp_path)
        ports = job.ports()
        start = time.time()
        flood = subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                stranger,
                sys.executable,
                "-c",
                STRANGER,
                ports.read_text(),
                str(CONNECTIONS),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            cwd="/",
        )
        flood_seconds = time.time() - start
        time.sleep(6)  # the silent ones time out (5 s) and are counted
        (tmp_path / "done").touch()
        job.join()
    assert not job.failure, job.failure
    assert flood.returncode == 0, flood.stderr[-2000:]
    assert int(flood.stdout.split()[-1]) == CONNECTIONS  # the stranger got every one made
    target, other = job.results
    print(
        f"\n{CONNECTIONS} stranger connections in {flood_seconds:.1f} s: {target['refused']} "
        f"refused; {target['calls']} exact all-reduces of 1 MiB meanwhile"
    )
    assert target["refused"] >= CONNECTIONS
    assert other["refused"] == 0
    assert target["calls"] == other["calls"] >= 5
    assert json.loads(ports.read_text())


def test_a_cut_cable_is_noticed_within_seconds_not_at_the_deadline(root_required, tmp_path):
    with netns.virtual_hosts(2, 2) as names:
        job = BackgroundJob("until_error", names, tmp_path, env={"JAX_ACCL_TIMEOUT_S": "120"})
        job.ports()
        time.sleep(1.0)
        # Rail 1 only: the coordination service lives on rail 0 and must stay reachable.
        netns.cut_cable(names, 1, 1)
        cut_at = time.time()
        job.join()
    assert not job.failure, job.failure
    for r in job.results:
        assert r["error"] is not None and "jax_accl" in r["error"], r
        noticed = r["error_at"] - cut_at
        print(
            f"\nprocess {r['process']}: noticed the cut after {noticed:.1f} s: {r['error'][-160:]}"
        )
        # Unanswered retransmissions for 5 s, or keepalive after 11 s idle; deadline 120 s.
        assert noticed < 30, r


def test_a_peer_late_by_25_s_is_waited_for_not_failed(root_required):
    """Two namespaced hosts x 1 process x 2 devices over two rails: the last process
    sleeps 25 s (a checkpoint) before a 64 MiB-per-device all-reduce; our data waits in
    its full receive window meanwhile. The call succeeds on both (deadline 120 s)."""
    with netns.virtual_hosts(2, 2) as names:
        results = launch.run_on_namespaced_hosts(
            [*WORKER, "--scenario", "late_peer", "--reference", "numpy"],
            names,
            2,
            "rail0,rail1",
            env=[{"JAX_ACCL_TIMEOUT_S": "120"}] * 2,
            timeout=400,
        )
    assert results[0]["waited_s"] > 20, results  # process 0 really waited for the late one


# Runs inside the stranger's namespace: holds `count` silent connections to each
# listener, opening a new one whenever the listener closes one, until <dir>/done.
HOLDER = r"""
import json, os, selectors, socket, sys, time
listeners, count, signals = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
selector = selectors.DefaultSelector()
def open_one(ip, port):
    try:
        s = socket.create_connection((ip, port), timeout=5)
        s.setblocking(False)
        selector.register(s, selectors.EVENT_READ, (ip, port))
        return 1
    except OSError:
        return 0
held = sum(open_one(ip, port) for ip, port in listeners for _ in range(count))
open(os.path.join(signals, "held"), "w").close()
reopened = 0
while not os.path.exists(os.path.join(signals, "done")):
    for key, _ in selector.select(0.1):  # closed by the listener: take its place again
        selector.unregister(key.fileobj)
        key.fileobj.close()
        reopened += open_one(*key.data)
print(held, reopened)
"""


def hold_places_while(job, namespace, ports, connections, tmp_path) -> str:
    """Runs HOLDER in `namespace` (`connections` to each listener of process 1) until
    `job` ends; returns what it printed (places held, places taken again)."""
    holder = subprocess.Popen(
        ["ip", "netns", "exec", namespace, sys.executable, "-c", HOLDER]
        + [ports.read_text(), str(connections), str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    job.join()
    (tmp_path / "done").touch()
    out, _ = holder.communicate(timeout=60)
    return out


def test_a_stranger_holding_silent_connections_cannot_lock_the_job_out(root_required, tmp_path):
    """A stranger on a third namespaced host holds 80 silent connections to each of process
    1's listeners (where the job's connections arrive) from before the job's first call,
    taking every place it is given
    again as soon as it loses it: the job's first connections and, after a failed call,
    its recovery's new ones are admitted all the same, every call exact."""
    with netns.virtual_hosts(3, 2) as names:
        stranger = names[2]
        job = BackgroundJob("lockout", names[:2], tmp_path)
        ports = job.ports()
        out = hold_places_while(job, stranger, ports, 80, tmp_path)
    assert not job.failure, job.failure
    held, reopened = map(int, out.split())
    assert held == 160 and reopened > 0, out  # it held on, and lost places it took again
    assert len(job.results) == 2
    for r in job.results:
        assert r["error"] is not None and "jax_accl" in r["error"], r
        assert r["recoveries"] == 1, r


def test_a_program_on_a_job_host_holding_every_place_from_its_address_cannot_lock_the_job_out(
    root_required, tmp_path
):
    """A program on process 0's own host (inside its namespace, so its connections come
    from the job's rail addresses, which process 1 counts as its peers') holds 40 silent
    connections to each of process 1's listeners, where the job's connections arrive:
    80 for the job's 64 handshake places, every lost one opened again at once, from
    before the job's first call. Each new connection takes the oldest place, so the
    job's first connections and, after a failed call, its recovery's new ones get in
    (deadline 30 s), every call exact; the holder only evicts itself."""
    with netns.virtual_hosts(2, 2) as names:
        job = BackgroundJob("lockout", names, tmp_path, env={"JAX_ACCL_TIMEOUT_S": "30"})
        ports = job.ports()
        out = hold_places_while(job, names[0], ports, 40, tmp_path)
    assert not job.failure, job.failure
    held, reopened = map(int, out.split())
    assert held == 80 and reopened > 0, out  # every place taken, and taken again
    by_process = {r["process"]: r for r in job.results}
    print(
        f"\nthe job's first 3 calls took {by_process[1]['first_calls_s']:.2f} s; "
        f"{by_process[1]['refused']} of the holder's connections evicted, {reopened} reopened"
    )
    assert by_process[1]["refused"] > 0  # its places were full: the holder was evicted
    for r in job.results:
        assert r["error"] is not None and "jax_accl" in r["error"], r  # the designed failure
        assert r["recoveries"] == 1, r
        assert r["first_calls_s"] < 20, r


FIREWALLED = (40960, 41087)  # JAX_ACCL_PORTS of the job below, closed on rail 1


def test_a_firewall_dropping_the_ports_is_an_error_within_seconds_naming_the_fix(root_required):
    """Two namespaced hosts x 1 process, rails 0 and 1; each host's rail 1 drops every
    connection request to jax_accl's port range unanswered (a firewall), rail 0 (the
    coordinator's) stays open. The job's first call, which connects its channels, fails
    on both processes within seconds (deadline 120 s), the error naming the address,
    the firewall and JAX_ACCL_PORTS."""
    with netns.virtual_hosts(2, 2) as names:
        for host in range(2):
            netns.drop_connections(names, host, 1, FIREWALLED)
        ports = f"{FIREWALLED[0]}-{FIREWALLED[1]}"
        results = launch.run_on_namespaced_hosts(
            [*WORKER, "--scenario", "first_call", "--reference", "numpy"],
            names,
            1,
            "rail0,rail1",
            env=[{"JAX_ACCL_TIMEOUT_S": "120", "JAX_ACCL_PORTS": ports}] * 2,
            timeout=300,
        )
    for r in results:
        print(f"\nprocess {r['process']} failed after {r['seconds']:.1f} s: {r['error']}")
    for r in results:
        assert all(FIREWALLED[0] <= p <= FIREWALLED[1] for ps in r["ports"] for p in ps), r
        assert r["error"] is not None, r
        assert r["seconds"] < 60, r  # the unanswered connect is given 10 s, the call 120 s
    for r in results:  # the connecting side's error, or the probing side's: the same words
        assert "no answer" in r["error"] and "firewall" in r["error"], r["error"]
        assert "JAX_ACCL_PORTS" in r["error"], r["error"]
        ends = [netns.rail_ip(0, 1), netns.rail_ip(1, 1)]  # the two addresses on rail 1
        assert all(ip in r["error"] for ip in ends), r["error"]


def test_a_peer_late_for_the_first_call_is_probed_and_waited_for(root_required):
    """Two namespaced hosts x 1 process, two rails: process 0 starts its first call 15 s
    late, so process 1 waits for process 0's connections past the 10 s after which it
    probes process 0's listeners: answered, it waits on. Both calls exact on both, and
    the probes are not counted as refused connections."""
    with netns.virtual_hosts(2, 2) as names:
        results = launch.run_on_namespaced_hosts(
            [*WORKER, "--scenario", "late_first_call", "--reference", "numpy"],
            names,
            1,
            "rail0,rail1",
            env=[{"JAX_ACCL_TIMEOUT_S": "120"}] * 2,
            timeout=300,
        )
    by_process = {r["process"]: r for r in results}
    assert by_process[1]["waited_s"] > 12, results  # it really waited past the probe
    assert all(r["refused"] == 0 for r in results), results
