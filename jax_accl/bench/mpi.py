"""The benchmark's MPI baseline: mpi4jax.allreduce over Open MPI, in n processes of one
CPU device each, timed exactly as jax_accl and gloo psum are in jax_accl.bench (K and
2K all-reduces chained in one jitted fori_loop; the difference over K per op), every
size checked against NumPy.

jax_accl.bench starts it under mpirun (`run`); rank 0 prints "RESULT <json>". Install
the baseline with `bash scripts/install_mpi.sh`. JAX's own MPI collectives would need
MPItrampoline's MPIwrapper library, which no package registry ships; mpi4jax is the MPI
path a JAX user installs."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from jax_accl.bench.report import nccl_row
from jax_accl.bench.sweep import BenchRows
from jax_accl.bench.timing import chain_length, median_call_seconds, per_op_interleaved
from jax_accl.testing.launch import worker_env
from jax_accl.units import human, parse_size


def mpirun() -> str | None:
    """The mpirun MPIRUN names (where it exists), else the one next to this interpreter
    (the Open MPI wheel's), else on PATH."""
    named = os.environ.get("MPIRUN")
    if named:  # a path, or a name on PATH; absolute (the baseline runs from /)
        found = shutil.which(named)
        return os.path.abspath(found) if found else None
    beside = Path(sys.executable).parent / "mpirun"
    return str(beside) if beside.exists() else shutil.which("mpirun")


def missing() -> str:
    """Why the MPI baseline cannot run here ("" when it can)."""
    if importlib.util.find_spec("mpi4jax") is None:
        return "mpi4jax is not installed"
    if mpirun() is None:
        named = os.environ.get("MPIRUN")
        return f"MPIRUN={named} is no program" if named else "mpirun is not on PATH"
    return ""


def will_run(args) -> bool:
    """Whether --mpi asks for the baseline where it can run (on: always)."""
    return args.mpi == "on" or (args.mpi == "auto" and not missing())


def run(n: int, sizes: str, loop: int, reps: int, timeout: float = 600.0, hosts=None) -> list[dict]:
    """Runs the baseline as n MPI processes; its rows (variant "mpi4jax"). `hosts`:
    [(namespace, ranks)] of namespaced hosts to spread them over (mpirun_on_hosts)."""
    reason = missing()
    if reason:
        raise RuntimeError(f"MPI baseline: {reason} (bash scripts/install_mpi.sh)")
    # Open MPI's shared-memory segments go into a directory of this run's, removed after
    # it: a run that ends badly (or, as root, some that end well) leaves them behind.
    backing = tempfile.mkdtemp(
        prefix="accl_bench_mpi_", dir="/dev/shm" if os.path.isdir("/dev/shm") else None
    )
    try:
        launcher = mpirun_on_hosts(hosts, backing) if hosts else [mpirun()]
        return _run_in(launcher, backing, n, sizes, loop, reps, timeout)
    finally:
        shutil.rmtree(backing, ignore_errors=True)


def mpirun_on_hosts(hosts, directory: str) -> list[str]:
    """mpirun on namespaced hosts [(namespace, ranks)] (netns.virtual_hosts'): started in
    the first host's namespace, each host named by its rail0 address, and Open MPI's
    remote launch (its ssh agent) a script of `directory` that runs the daemon in the
    namespace of the address it is given. Each host also gets a hostname of its own (a
    UTS namespace): Open MPI names its session files by hostname, and two daemons
    sharing theirs crash their processes (SIGBUS, SIGSEGV). MPI's traffic between hosts
    goes by TCP on rail0 (as gloo's), within a host by shared memory (which Open MPI
    never uses between two of its daemons, so never between namespaced hosts)."""
    from jax_accl.testing import netns

    addresses = [netns.rail_ip(h, 0) for h in range(len(hosts))]
    agent = Path(directory) / "netns_agent.sh"
    cases = "".join(f"  {a}) ns={name} ;;\n" for a, (name, _) in zip(addresses, hosts))
    agent.write_text(
        "#!/bin/sh\n# Open MPI's ssh agent: <address> <command>, run in that host's namespace.\n"
        f"address=$1; shift\ncase $address in\n{cases}  *) exit 1 ;;\nesac\n"
        'exec ip netns exec "$ns" unshare --uts /bin/sh -c "hostname $ns; $*"\n'
    )
    agent.chmod(0o755)
    first = hosts[0][0]
    return [
        *("ip", "netns", "exec", first, "unshare", "--uts", "/bin/sh", "-c"),
        *(f'hostname {first}; exec "$0" "$@"', mpirun()),
        *("--prtemca", "plm_ssh_agent", str(agent)),
        *("--host", ",".join(f"{a}:{ranks}" for a, (_, ranks) in zip(addresses, hosts))),
        *("--prtemca", "oob_tcp_if_include", "rail0"),
        *("--mca", "btl_tcp_if_include", "rail0"),
        # Each daemon takes this machine's cores for its host's own, so its processes
        # would poll without yielding to the other hosts' (and to the TCP they wait for):
        # 2 hosts x 2 processes, 4 MiB, 805 ms per all-reduce, 23 ms yielding.
        *("--mca", "mpi_yield_when_idle", "1"),
    ]


def _run_in(
    launcher: list, backing: str, n: int, sizes: str, loop: int, reps: int, timeout: float
) -> list[dict]:
    cmd = [
        *launcher,
        "--mca",
        "btl_sm_backing_directory",
        backing,
        "--oversubscribe",
        "--bind-to",
        "none",
        "-np",
        str(n),
        sys.executable,
        "-m",
        "jax_accl.bench.mpi",
        "--sizes",
        sizes,
        "--loop",
        str(loop),
        "--reps",
        str(reps),
    ]
    env = worker_env(
        {
            "MPI4JAX_NO_WARN_JAX_VERSION": "1",
            # Open MPI refuses root unless told twice; CI runs as root.
            "OMPI_ALLOW_RUN_AS_ROOT": "1",
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        }
    )
    try:
        done = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd="/"
        )
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(
            f"MPI baseline: {n} processes did not finish in {timeout:.0f} s:\n"
            f"{(e.stdout or '')[-3000:]}"
        ) from None
    results = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not results:
        raise RuntimeError(
            f"MPI baseline failed (exit {done.returncode}):\n"
            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return json.loads(results[-1][len("RESULT ") :])


def add_mpi_rows(rows: list[dict], args, label: str, hosts=None) -> list[str]:
    """Runs the MPI baseline (--mpi) with as many processes as the job has devices (on
    the namespaced `hosts` [(namespace, ranks)], if given) and appends its rows; returns
    the comment lines comparing jax_accl with it."""
    n = rows[0]["devices"]
    if not will_run(args):
        return [f"MPI baseline not run: {missing() or '--mpi off'}"]
    gloo = {r["size_bytes"]: r["seconds_per_op"] for r in rows if r["variant"] == "jax.lax.psum"}
    mpi = {}
    try:
        measured = run(n, args.sizes, args.loop, args.reps, hosts=hosts)
    except Exception as e:  # what the others measured is still printed
        return [f"MPI baseline FAILED (no mpi4jax rows): {e}".replace("\n", "\n#   ")]
    for r in measured:
        rows.append(nccl_row({**r, "setting": label}, gloo[r["size_bytes"]]))
        mpi[r["size_bytes"]] = r["seconds_per_op"]
    rows.sort(key=lambda r: r["size_bytes"])  # stable: each size's rows stay together
    lines = []
    for r in rows:
        if r["variant"] == "accl:auto":
            lines.append(
                f"{human(r['size_bytes'])}: jax_accl auto is "
                f"{mpi[r['size_bytes']] / r['seconds_per_op']:.2f}x faster than "
                f"mpi4jax (Open MPI, {n} processes x 1 device"
                + (f" on {len(hosts)} hosts, rail0)" if hosts else ")")
            )
    return lines


def worker_main(argv=None) -> int:
    """One MPI rank: every size, a checked call, then the chained timing; rank 0 reports."""
    parser = argparse.ArgumentParser(prog="python -m jax_accl.bench.mpi")
    parser.add_argument("--sizes", required=True)
    parser.add_argument("--loop", type=int, default=0)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args(argv)

    import jax
    import mpi4jax
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()

    def reduce(v):
        return mpi4jax.allreduce(v, op=MPI.SUM, comm=comm)

    def program(steps):
        return jax.jit(lambda a: jax.lax.fori_loop(0, steps, lambda _, v: reduce(v), a))

    rows = []
    for size in (parse_size(s) for s in args.sizes.split(",")):
        host = BenchRows(size, n)
        x = jax.device_put(host.row(rank))
        once = jax.jit(reduce)
        if not np.array_equal(np.asarray(once(x)), host.sum()):
            raise AssertionError(f"mpi4jax at {human(size)}: wrong result on rank {rank}")
        single = median_call_seconds(once, x, args.reps)
        loop = chain_length(size, args.loop, n)
        chains = {"mpi4jax": (program(loop), program(2 * loop))}
        per_op, cpu = per_op_interleaved(chains, x, loop, args.reps, size)
        t = per_op["mpi4jax"]
        rows.append(
            dict(
                size_bytes=size,
                devices=n,
                variant="mpi4jax",
                seconds_per_op=t,
                single_call_s=single,
                # Every rank's CPU seconds per op, summed (the job's, as the sweep's rows).
                cpu_s_per_op=comm.allreduce(cpu["mpi4jax"], op=MPI.SUM),
            )
        )
    if rank == 0:
        print("RESULT " + json.dumps(rows), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(worker_main())
