"""A second harness for the fast-wire figures, written from the docs (docs/benchmarks.md,
"How the benchmarks measure", "On a fast wire") and not from the bench's code: its own
two namespaced hosts (one rail, unshaped), the wire measured by iperf3 in the same run,
jax_accl against gloo (`jax.lax.psum` over `jax.distributed` with JAX's gloo CPU
collectives), gloo on the system's congestion control and on reno, interleaved (root):

    python benchmarks/second_harness.py --layouts 2x1x1,2x2x1 --sizes 1,4,16,64 --rounds 2
    python benchmarks/second_harness.py --link veth --offloads off --mtu 9000 --rounds 1
    python benchmarks/second_harness.py --compare-probes 2    # the wire by each probe, no job

Each host is a network namespace with its own hostname (a UTS namespace) and an
/etc/hosts naming both (`ip netns exec` mounts /etc/netns/<ns>/hosts), so jax_accl's
host identity and gloo's address come from the hostname as on real hosts; no JAX_ACCL_*
knob is set. `--link bridge` (the default) joins the hosts through a bridge in a third
namespace, `--link veth` by one veth pair. Before every job: `iperf3 --bidir` between the
hosts (reno and the system's congestion control, `--iperf-seconds` each), and two iperf3
clients at once, one per direction (reno), since Debian 12's iperf3 drives both
directions of --bidir from one thread. A job is one layout (hosts x processes per host x
1 device) with the host namespaces' `net.ipv4.tcp_congestion_control` set to one choice
(per network namespace; gloo's sockets take it, jax_accl's set reno on their own unless
JAX_ACCL_TCP_CONGESTION says otherwise); the jobs go round layouts and both choices, in
a new order each round. In a job, per size: K and 2K all-reduces chained in a jitted
fori_loop, per op = median of (t(2K) - t(K)) / K, the variants in a new order each
repetition, after a warm-up (256 MiB of all-reduces per variant, or --warm-up-calls);
CPU seconds per op: getrusage of every process over a variant's timed calls over the
all-reduces they ran, summed over the job; the results of both variants compared
bitwise. "x wire": time per op over S / (rate each way), S the bytes per
device, the rate iperf3 --bidir's on the congestion control that variant's sockets use.
Namespaces and processes are removed on exit, on an error and on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid

SUBNET = "10.165.0"
IPERF_PORT = 5299
CHILDREN: list = []  # every process started (each in a session of its own), ended on exit


def spawn(cmd: list[str], **kw) -> subprocess.Popen:
    CHILDREN.append(subprocess.Popen(cmd, start_new_session=True, **kw))
    return CHILDREN[-1]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layouts", default="2x1x1,2x2x1", help="HxPx1, comma-separated")
    parser.add_argument("--sizes", default="1,4,16,64", help="MiB per device, comma-separated")
    parser.add_argument("--rounds", type=int, default=2, help="times round every job")
    parser.add_argument("--reps", type=int, default=7, help="repetitions per size in a job")
    parser.add_argument(
        "--gloo-congestion",
        default="system,reno",
        help="the host namespaces' congestion control for each job (system: the kernel's)",
    )
    parser.add_argument("--link", choices=("bridge", "veth"), default="bridge")
    parser.add_argument("--mtu", type=int, default=1500)
    parser.add_argument(
        "--offloads", choices=("default", "off"), default="default", help="ethtool -K tso/gso/gro"
    )
    parser.add_argument("--iperf-seconds", type=float, default=3.0)
    parser.add_argument(
        "--warm-up-calls",
        type=int,
        default=0,
        help="all-reduces of each variant before timing (0: 256 MiB of them, at least 2 pairs)",
    )
    parser.add_argument(
        "--chain", type=int, default=0, help="K, the all-reduces chained (0: by size, 4-16)"
    )
    parser.add_argument(
        "--compare-probes",
        type=int,
        default=0,
        help="only measure the wire, this many rounds: iperf3 --bidir, two iperf3 and the "
        "bench's probe (jax_accl/bench/wire.py), each on reno and the system's",
    )
    parser.add_argument("--json", default="", help="append every row to this JSON-lines file")
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# ---------------------------------------------------------------- namespaces (root)


def run(*cmd: str, **kw) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


class Hosts:
    """Two namespaced hosts h0 and h1 (10.165.0.1, .2 on interface eth0), joined by a
    bridge or by one veth pair; removed by close()."""

    def __init__(self, link: str, mtu: int, offloads: str):
        self.created: list[str] = []
        self.etc: list[str] = []
        try:
            self._build(link, mtu, offloads)
        except BaseException:
            self.close()
            raise

    def _build(self, link: str, mtu: int, offloads: str) -> None:
        tag = uuid.uuid4().hex[:6]
        self.names = [f"sh{tag}-h0", f"sh{tag}-h1"]
        self.switch = f"sh{tag}-sw" if link == "bridge" else ""
        for ns in [*self.names, *([self.switch] if self.switch else [])]:
            run("ip", "netns", "add", ns)
            self.created.append(ns)
            run("ip", "-n", ns, "link", "set", "lo", "up")
        hosts = "".join(f"{self.ip(h)} {self.hostname(h)}\n" for h in range(2))
        for ns in self.names:  # `ip netns exec` mounts /etc/netns/<ns>/hosts on /etc/hosts
            os.makedirs(f"/etc/netns/{ns}", exist_ok=True)
            self.etc.append(f"/etc/netns/{ns}")
            with open(f"/etc/netns/{ns}/hosts", "w") as f:
                f.write("127.0.0.1 localhost\n" + hosts)
        if link == "bridge":
            run("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
            run("ip", "-n", self.switch, "link", "set", "br0", "up")
            for h, ns in enumerate(self.names):
                port = f"port{h}"
                self._veth(self.switch, port, ns)
                run("ip", "-n", self.switch, "link", "set", port, "master", "br0")
                run("ip", "-n", self.switch, "link", "set", port, "mtu", str(mtu), "up")
                self._offloads(self.switch, port, offloads)
        else:
            a, b = self.names
            self._veth(a, "eth0", b)
        for h, ns in enumerate(self.names):
            run("ip", "-n", ns, "link", "set", "eth0", "mtu", str(mtu))
            run("ip", "-n", ns, "addr", "add", f"{self.ip(h)}/24", "dev", "eth0")
            run("ip", "-n", ns, "link", "set", "eth0", "up")
            self._offloads(ns, "eth0", offloads)

    @staticmethod
    def _veth(ns: str, dev: str, peer_ns: str) -> None:
        """A veth pair: `dev` in namespace `ns`, its peer eth0 in `peer_ns`."""
        run("ip", "-n", ns, "link", "add", dev, "type", "veth", "peer", "name", "eth0",
            "netns", peer_ns)  # fmt: skip

    @staticmethod
    def _offloads(ns: str, dev: str, offloads: str) -> None:
        if offloads == "off":
            run(
                "ip",
                "netns",
                "exec",
                ns,
                "ethtool",
                "-K",
                dev,
                "tso",
                "off",
                "gso",
                "off",
                "gro",
                "off",
            )

    @staticmethod
    def ip(h: int) -> str:
        return f"{SUBNET}.{h + 1}"

    @staticmethod
    def hostname(h: int) -> str:
        return f"host{h}"

    def describe(self) -> str:
        out = []
        for ns in self.names:
            feats = subprocess.run(
                ["ip", "netns", "exec", ns, "ethtool", "-k", "eth0"], capture_output=True, text=True
            ).stdout
            on = [
                line.split(":")[0].strip()
                for line in feats.splitlines()
                if line.strip().startswith(
                    ("tcp-segmentation-offload", "generic-segmentation", "generic-receive")
                )
                and ": on" in line
            ]
            qdisc = run("ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", "eth0").split(
                "\n"
            )[0]
            out.append(f"{ns}: offloads on {on or 'none'}; qdisc {qdisc.strip()}")
        return "; ".join(out)

    def exec(self, h: int) -> list[str]:
        """The command prefix running in host h: its network namespace, its hostname."""
        return [
            "ip",
            "netns",
            "exec",
            self.names[h],
            "unshare",
            "--uts",
            "sh",
            "-c",
            f'hostname {self.hostname(h)} && exec "$0" "$@"',
        ]

    def set_congestion(self, choice: str) -> None:
        for ns in self.names:
            run(
                "ip",
                "netns",
                "exec",
                ns,
                "sysctl",
                "-qw",
                f"net.ipv4.tcp_congestion_control={choice}",
            )

    def close(self) -> None:
        for ns in reversed(self.created):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        for path in self.etc:
            shutil.rmtree(path, ignore_errors=True)
        self.created, self.etc = [], []


def system_congestion() -> str:
    with open("/proc/sys/net/ipv4/tcp_congestion_control") as f:
        return f.read().strip()


# ---------------------------------------------------------------- the wire: iperf3


def _iperf_server(hosts: Hosts, port: int) -> subprocess.Popen:
    server = spawn(
        [
            "ip",
            "netns",
            "exec",
            hosts.names[1],
            "iperf3",
            "-s",
            "-1",
            "-B",
            hosts.ip(1),
            "-p",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(100):
        listening = run("ip", "netns", "exec", hosts.names[1], "ss", "-ltn", f"sport = :{port}")
        if f":{port}" in listening:
            return server
        time.sleep(0.05)
    server.kill()
    raise RuntimeError(f"iperf3 server on {hosts.names[1]} port {port} did not start")


def _iperf_client(hosts: Hosts, port: int, seconds: float, extra: list[str]) -> subprocess.Popen:
    return spawn(
        [
            "ip",
            "netns",
            "exec",
            hosts.names[0],
            "iperf3",
            "-c",
            hosts.ip(1),
            "-p",
            str(port),
            "-t",
            f"{seconds:g}",
            "-J",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(procs: list[subprocess.Popen], seconds: float) -> list[dict]:
    out = []
    try:
        for p in procs:
            stdout, _ = p.communicate(timeout=seconds + 30)
            if stdout is not None:
                out.append(json.loads(stdout))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return out


def iperf_bidir(hosts: Hosts, congestion: str, seconds: float) -> float:
    """Bytes/s each way at once by `iperf3 --bidir -C congestion`: the two directions'
    received rates averaged."""
    server = _iperf_server(hosts, IPERF_PORT)
    client = _iperf_client(hosts, IPERF_PORT, seconds, ["--bidir", "-C", congestion])
    (result,) = _finish([client, server], seconds)
    end = result["end"]
    ways = [
        end["sum_received"]["bits_per_second"],
        end["sum_received_bidir_reverse"]["bits_per_second"],
    ]
    return sum(ways) / 2 / 8


def iperf_two_clients(hosts: Hosts, congestion: str, seconds: float) -> float:
    """Bytes/s each way at once by two iperf3 processes, one per direction (-R)."""
    servers = [_iperf_server(hosts, IPERF_PORT + i) for i in range(2)]
    clients = [
        _iperf_client(hosts, IPERF_PORT + i, seconds, ["-C", congestion, *(["-R"] if i else [])])
        for i in range(2)
    ]
    results = _finish([*clients, *servers], seconds)
    ways = [r["end"]["sum_received"]["bits_per_second"] for r in results]
    return sum(ways) / 2 / 8


def bench_probe(hosts: Hosts, congestion: str, seconds: float) -> float:
    """Bytes/s each way at once by the bench's own probe (jax_accl/bench/wire.py, run as a
    script at each end, as the bench runs it)."""
    import jax_accl.bench.wire as wire

    probe = [sys.executable, wire.__file__, "--seconds", f"{seconds:g}"]
    probe += ["--congestion", congestion]
    server = spawn(
        ["ip", "netns", "exec", hosts.names[1], *probe, "--listen", hosts.ip(1)],
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    ready = select.select([server.stdout], [], [], 60)[0]  # a probe that hangs: an error
    if not ready or server.stdout.readline().strip() != "READY":
        server.kill()
        raise RuntimeError("the bench's probe did not start on host 1 within 60 s")
    client = spawn(
        ["ip", "netns", "exec", hosts.names[0], *probe, "--connect", hosts.ip(1)],
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    ends = [p.communicate(timeout=seconds + 60)[0] for p in (client, server)]
    ways = []
    for text in ends:
        (stream,) = json.loads(next(ln for ln in text.splitlines() if ln.startswith("{")))[
            "streams"
        ]
        ways.append(stream["received"] / stream["seconds"])
    return sum(ways) / 2


def compare_probes(hosts: Hosts, rounds: int, seconds: float, system: str) -> None:
    probes = {}
    for congestion in ("reno", system):
        probes[f"iperf3 --bidir, {congestion}"] = (iperf_bidir, congestion)
        probes[f"two iperf3, {congestion}"] = (iperf_two_clients, congestion)
        probes[f"the bench's probe, {congestion}"] = (bench_probe, congestion)
    rates = {name: [] for name in probes}
    for r in range(rounds):
        order = list(probes)
        random.Random(r).shuffle(order)
        for name in order:
            probe, congestion = probes[name]
            rates[name].append(probe(hosts, congestion, seconds))
    print(f"# the wire each way at once, GB/s, {rounds} rounds, load {os.getloadavg()[0]:.1f}")
    for name, got in rates.items():
        print(f"  {name:32s} " + " ".join(f"{r / 1e9:.2f}" for r in got))


# ---------------------------------------------------------------- a job


def chain_length(size: int) -> int:
    """K, the all-reduces chained per call: 32 MiB of them, 4 to 16 (2K sums of n <= 4
    ranks' small integers stay exact and finite in float32)."""
    return max(4, min(16, (32 << 20) // size))


def worker(spec: dict) -> None:
    import resource

    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(spec["coordinator"], spec["num_processes"], spec["process_id"])
    import jax_accl

    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    n = len(devices)
    mesh = Mesh(np.array(devices), ("i",))
    sharding = NamedSharding(mesh, P("i"))
    variants = {"jax_accl": jax_accl.psum, "gloo": jax.lax.psum}

    def chained(reduce, k):
        body = lambda a: jax.lax.fori_loop(0, k, lambda _, v: reduce(v, "i"), a)  # noqa: E731
        return jax.jit(
            jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"), check_vma=False)
        )

    def cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    def timed(fn, x) -> float:
        start = time.perf_counter()
        jax.block_until_ready(fn(x))
        return time.perf_counter() - start

    rows = []
    for mib in spec["sizes"]:
        size = mib << 20
        k = spec["chain"] or chain_length(size)
        x = jax.make_array_from_callback(
            (n, size // 4),
            sharding,
            lambda i, m=size // 4: np.full((1, m), 1 + i[0].start, np.float32),
        )
        chains = {name: (chained(f, k), chained(f, 2 * k)) for name, f in variants.items()}
        results = {}
        for name, (short, long) in chains.items():
            ops = spec["warm_up_calls"] or (256 << 20) // size
            for _ in range(max(2, -(-ops // (3 * k)))):  # compile, warm up
                timed(short, x), timed(long, x)
            results[name] = np.asarray(long(x).addressable_shards[0].data)
        if not np.array_equal(results["jax_accl"], results["gloo"]):
            raise AssertionError(f"{mib} MiB: jax_accl's result differs from gloo's")
        per_op = {name: [] for name in chains}
        cpu_total = dict.fromkeys(chains, 0.0)
        for rep in range(spec["reps"]):
            order = list(chains)
            random.Random(rep * 7919 + mib).shuffle(order)  # the same order in every process
            for name in order:
                short, long = chains[name]
                before = cpu()
                t_long = timed(long, x)
                t_short = timed(short, x)
                cpu_total[name] += cpu() - before
                per_op[name].append((t_long - t_short) / k)
        rows.append(
            {
                "size_mib": mib,
                "k": k,
                "per_op_s": {name: statistics.median(v) for name, v in per_op.items()},
                "cpu_per_op_s": {name: c / (3 * k * spec["reps"]) for name, c in cpu_total.items()},
            }
        )
    stats = jax_accl.stats()
    done = {"process_id": spec["process_id"], "rows": rows}
    done["stripes"] = stats.get("stripes_per_rail", {}).get("stripes", 1)
    done["transports"] = sorted(stats.get("transports", {}))
    print("RESULT " + json.dumps(done), flush=True)
    jax.distributed.shutdown()


def run_job(
    hosts: Hosts, per_host: int, sizes: list[int], reps: int, warm_up: int, chain: int
) -> list[dict]:
    """One job: per_host processes on each host; rows with times of process 0 and CPU summed."""
    port = 30000 + random.Random().randrange(20000)
    count = 2 * per_host
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_ACCL_")}
    env["PYTHONUNBUFFERED"] = "1"
    procs = []
    for pid in range(count):
        spec = {
            "coordinator": f"{hosts.ip(0)}:{port}",
            "num_processes": count,
            "process_id": pid,
            "sizes": sizes,
            "reps": reps,
            "warm_up_calls": warm_up,
            "chain": chain,
        }
        procs.append(
            spawn(
                [
                    *hosts.exec(pid // per_host),
                    sys.executable,
                    os.path.abspath(__file__),
                    "--worker",
                    json.dumps(spec),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
                cwd="/",
            )
        )
    outputs = []
    deadline = time.monotonic() + 3600
    for p in procs:
        try:
            stdout, stderr = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise RuntimeError("a worker did not finish in an hour") from None
        if p.returncode != 0:
            raise RuntimeError(f"worker {procs.index(p)} exited {p.returncode}: {stderr[-3000:]}")
        outputs.append(
            json.loads(next(ln[7:] for ln in stdout.splitlines() if ln.startswith("RESULT ")))
        )
    rows = outputs[0]["rows"]
    for row in rows:  # what jax_accl ran on: its connections per rail, its transports
        row["stripes"], row["transports"] = outputs[0]["stripes"], outputs[0]["transports"]
    for row_index, row in enumerate(rows):
        for name in row["cpu_per_op_s"]:
            row["cpu_per_op_s"][name] = sum(
                o["rows"][row_index]["cpu_per_op_s"][name] for o in outputs
            )
    return rows


def kill_all() -> None:
    for p in CHILDREN:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


# ---------------------------------------------------------------- the report


def report(job: dict) -> list[str]:
    wire = job["wire"]
    lines = [
        f"# {job['layout']}, host namespaces on {job['congestion']} ({job['hosts']}), "
        f"load {job['load']}",
        f"#   wire each way at once: iperf3 --bidir reno {wire['bidir_reno'] / 1e9:.2f} GB/s, "
        f"{job['system']} {wire['bidir_system'] / 1e9:.2f} GB/s; "
        f"two iperf3 (one per way) reno {wire['two_reno'] / 1e9:.2f} GB/s; jax_accl's "
        f"transports {job['rows'][0].get('transports')}, "
        f"{job['rows'][0].get('stripes')} connection(s) per rail and peer",
        "# size  jax_accl (x wire)     gloo (x wire)         ratio   CPU/op jax_accl / gloo",
    ]
    gloo_wire = wire["bidir_reno" if job["congestion"] == "reno" else "bidir_system"]
    for row in job["rows"]:
        size = row["size_mib"] << 20
        a, g = row["per_op_s"]["jax_accl"], row["per_op_s"]["gloo"]
        a_wire, g_wire = a / (size / wire["bidir_reno"]), g / (size / gloo_wire)
        ca, cg = row["cpu_per_op_s"]["jax_accl"], row["cpu_per_op_s"]["gloo"]
        lines.append(
            f"  {row['size_mib']:>3} MiB  {a * 1e3:8.3f} ms ({a_wire:5.2f}x)"
            f"  {g * 1e3:8.3f} ms ({g_wire:5.2f}x)  {g / a:5.2f}x  "
            f"{ca * 1e3:7.2f} / {cg * 1e3:7.2f} ms ({ca / cg:.2f}x)"
        )
    return lines


def main(args) -> int:
    if args.worker:
        worker(json.loads(args.worker))
        return 0
    if os.geteuid() != 0:
        raise SystemExit("second_harness.py: needs root (it creates network namespaces)")
    if shutil.which("iperf3") is None:
        raise SystemExit("second_harness.py: no iperf3 (Debian: apt-get install iperf3)")
    if args.offloads == "off" and shutil.which("ethtool") is None:
        raise SystemExit(
            "second_harness.py: --offloads off needs ethtool (apt-get install ethtool)"
        )
    layouts = []
    for text in args.layouts.split(","):
        h, p, d = (int(v) for v in text.lower().split("x"))
        if h != 2 or d != 1 or p < 1:
            raise SystemExit(f"second_harness.py: layout {text}: only 2xPx1 (2 hosts, 1 device)")
        layouts.append((text, p))
    sizes = [int(s) for s in args.sizes.split(",")]
    system = system_congestion()
    choices = [system if c == "system" else c for c in args.gloo_congestion.split(",")]

    def stop(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, stop)
    hosts = None
    commit = subprocess.run(
        ["git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    print(
        f"# second harness at {commit or '?'}, system congestion control {system}, "
        f"link {args.link}, MTU {args.mtu}, offloads {args.offloads}",
        flush=True,
    )
    try:
        hosts = Hosts(args.link, args.mtu, args.offloads)
        print("# " + hosts.describe(), flush=True)
        if args.compare_probes:
            compare_probes(hosts, args.compare_probes, args.iperf_seconds, system)
            return 0
        jobs = [(layout, per_host, c) for layout, per_host in layouts for c in choices]
        for rnd in range(args.rounds):
            order = jobs[:] if rnd % 2 == 0 else jobs[::-1]
            for layout, per_host, congestion in order:
                hosts.set_congestion(congestion)
                load_before = os.getloadavg()[0]
                wire = {
                    "bidir_reno": iperf_bidir(hosts, "reno", args.iperf_seconds),
                    "bidir_system": iperf_bidir(hosts, system, args.iperf_seconds),
                    "two_reno": iperf_two_clients(hosts, "reno", args.iperf_seconds),
                }
                rows = run_job(hosts, per_host, sizes, args.reps, args.warm_up_calls, args.chain)
                job = {
                    "round": rnd,
                    "layout": layout,
                    "congestion": congestion,
                    "system": system,
                    "hosts": f"{args.link}, MTU {args.mtu}, offloads {args.offloads}"
                    + (f", {args.warm_up_calls} warm-up calls" if args.warm_up_calls else "")
                    + (f", K={args.chain}" if args.chain else ""),
                    "load": f"{load_before:.1f} -> {os.getloadavg()[0]:.1f}",
                    "commit": commit,
                    "wire": wire,
                    "rows": rows,
                }
                print("\n".join(report(job)), flush=True)
                if args.json:
                    with open(args.json, "a") as f:
                        f.write(json.dumps(job) + "\n")
    except KeyboardInterrupt:
        print("# interrupted: cleaning up", file=sys.stderr)
        return 130
    finally:
        kill_all()
        if hosts is not None:
            hosts.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(parse_args()))
