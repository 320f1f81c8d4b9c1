"""The benchmark across processes, on one host and on namespaced hosts: gloo psum,
jax_accl and the MPI baseline (mpi4jax over Open MPI, installed by scripts/install_mpi.sh,
which the test command runs) in one table, every row checked against NumPy by the
workers; the demo across processes and on namespaced hosts."""

import json
import os
import re
import subprocess
import sys

import jax
import numpy as np
import pytest

from jax_accl.testing import launch


def bench(*args, timeout):
    """python -m jax_accl.bench with `args`; the finished process, which must succeed."""
    done = subprocess.run(
        [sys.executable, "-m", "jax_accl.bench", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd="/",
        env={**os.environ, "XLA_FLAGS": ""},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.mark.once  # the bench's table, whatever JAX's version (tests/conftest.py)
@pytest.mark.timeout(900)  # past the bench's own 600 s, which reports its output
def test_processes_table_has_gloo_accl_and_mpi_rows(tmp_path):
    rows_path = tmp_path / "rows.jsonl"
    done = bench(
        "--processes",
        "2",
        "--devices",
        "2",
        "--sizes",
        "64KiB,512KiB",
        "--algorithms",
        "auto,ring",
        "--reps",
        "1",
        "--loop",
        "2",
        "--mpi",
        "on",
        "--json",
        str(rows_path),
        timeout=600,
    )
    rows = [json.loads(line) for line in open(rows_path)]
    assert [(r["size_bytes"], r["variant"]) for r in rows] == [
        (size, variant)
        for size in (64 << 10, 512 << 10)
        for variant in ("jax.lax.psum", "accl:auto", "accl:ring", "mpi4jax")
    ]
    for r in rows:
        assert r["devices"] == 4
        assert r["seconds_per_op"] > 0 and r["busbw_gbs"] > 0 and r["memory_limit_s"] > 0
    assert "jax_accl auto is" in done.stdout and "4 processes x 1 device" in done.stdout
    # Progress on stderr: each size as process 0 starts it, then the MPI baseline.
    progress = [line for line in done.stderr.splitlines() if line.startswith("[jax_accl")]
    label = "[jax_accl.bench] {}/3 2x2 processes x devices, one host: {} ("
    assert progress[0].startswith(label.format(1, "64KiB"))
    assert progress[1].startswith(label.format(2, "512KiB")) and "left)" in progress[1]
    assert progress[2].startswith("[jax_accl.bench] 3/3 the MPI baseline (")
    assert progress[3].startswith("[jax_accl.bench] done: 3 pieces in ")


@pytest.mark.netns
def test_hosts_table_has_each_tier_and_progress(tmp_path):
    """`bench --hosts` on two namespaced hosts (root; CI runs it), unshaped: the wire's
    own rate measured per rail and on both at once, every row's time against that wire
    limit and its CPU seconds per op (every process's), the MPI baseline on the same
    hosts (2 processes on each), the time per tier, the bytes per rail, the plot and the
    progress of every size; the baselines on reno (--peer-congestion)."""
    rows_path = tmp_path / "rows.jsonl"
    done = bench(
        "--hosts",
        "2",
        "--processes-per-host",
        "1",
        "--devices",
        "2",
        "--rails",
        "2",
        "--rate-mbit",
        "0",
        "--all-rails-only",
        "--sizes",
        "64KiB,1MiB",
        "--algorithms",
        "auto,ring",
        "--reps",
        "1",
        "--loop",
        "2",
        "--wire-seconds",
        "1",
        "--mpi",
        "on",
        "--peer-congestion",
        "reno",
        "--plot",
        str(tmp_path / "hosts.png"),
        "--json",
        str(rows_path),
        timeout=300,
    )
    label = "2 hosts x 1 processes x 2 devices, 2 of 2 rails unshaped"
    # The baselines' sockets on the congestion control asked for (read back from a host).
    peers = "the baselines' congestion control reno (set by --peer-congestion)"
    baseline = f"baseline: jax.lax.psum over gloo on rail0, {peers}"
    header = f"# {label}; {baseline}; the wire each way at once: "
    wire = next(line for line in done.stdout.splitlines() if line.startswith(header))
    rates = re.findall(r"(rail\d|all rails) ([\d.]+) GB/s", wire[len(header) :])
    assert [name for name, _ in rates] == ["rail0", "rail1", "all rails"], wire
    assert all(float(rate) > 0 for _, rate in rates), wire
    assert "x wire" in done.stdout and "CPU/op" in done.stdout
    rows = [json.loads(line) for line in open(rows_path)]
    assert {r["variant"] for r in rows} == {"jax.lax.psum", "accl:auto", "accl:ring", "mpi4jax"}
    assert "mpi4jax (Open MPI, 4 processes x 1 device on 2 hosts, rail0)" in done.stdout
    table = [line.split() for line in done.stdout.splitlines() if line.endswith("us")]
    for r, printed in zip(rows, table, strict=True):
        assert r["wire_limit_s"] > 0 and r["cpu_s_per_op"] > 0, r
        # x wire, the 7th column: time per op over the wire limit.
        assert printed[6] == f"{r['seconds_per_op'] / r['wire_limit_s']:.2f}x", printed
        # Sanity, not speed: no whole call beats the wire by 2x. (Per op, the difference
        # of 2K and K chained calls, one repetition on a loaded 2-core machine can.)
        assert r["single_call_s"] / r["wire_limit_s"] >= 0.5, r
    assert "# 1MiB accl:auto (hierarchical) per call: local reduce-scatter" in done.stdout
    assert "'tcp:rail0'" in done.stdout and "'tcp:rail1'" in done.stdout
    assert (tmp_path / "hosts-2rail.png").read_bytes()[:4] == b"\x89PNG"
    progress = [line for line in done.stderr.splitlines() if line.startswith("[jax_accl")]
    assert progress[0].startswith(f"[jax_accl.bench] 1/3 {label}: 64KiB (")
    assert progress[1].startswith(f"[jax_accl.bench] 2/3 {label}: 1MiB (")
    assert progress[2].startswith(f"[jax_accl.bench] 3/3 {label}: the MPI baseline (")
    assert progress[3].startswith("[jax_accl.bench] done: 3 pieces in ")


def test_calibrating_the_wire_stores_rates_and_a_step_that_jobs_go_by(root_required, tmp_path):
    """`bench --calibrate --hosts 2` (unshaped, two rails): each rail's rate and both at
    once, a step between the hosts, stored; the bench's jobs then say how many rails they
    stripe over by it, and a fresh process's model is the stored one's."""
    env = {**os.environ, "JAX_ACCL_CACHE": str(tmp_path), "XLA_FLAGS": ""}
    env.pop("JAX_ACCL_LINK_GBITS", None)
    args = ["--calibrate", "--hosts", "2", "--rails", "2", "--rate-mbit", "0"]
    done = subprocess.run(
        [sys.executable, "-m", "jax_accl.bench", *args, "--reps", "2", "--wire-seconds", "0.5"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",
        env=env,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    wire = json.loads((tmp_path / "cost_model.json").read_text())["wire"]
    assert wire["rails"] == 2
    assert wire["one_rail_bytes_per_s"] > 1e6 and wire["all_rails_bytes_per_s"] > 1e6, wire
    assert 0 < wire["net_alpha"] < 0.1 and len(wire["measured"]) == 4, wire
    gain = wire["all_rails_bytes_per_s"] / wire["one_rail_bytes_per_s"]
    striped = 2 if gain >= 1.15 else 1
    assert f"# jobs with 2 rails stripe over {striped}" in done.stdout, done.stdout
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json; from jax_accl import _accl, cost_model; cost_model.ensure_loaded(); "
            "print(json.dumps(_accl.get_cost_model()))",
        ],
        capture_output=True,
        text=True,
        cwd="/",
        env=env,
        timeout=120,
    )
    model = json.loads(loaded.stdout)
    assert model["net_alpha"] == pytest.approx(wire["net_alpha"])
    rate = wire["all_rails_bytes_per_s"] / 2 if striped == 2 else wire["one_rail_bytes_per_s"]
    assert model["net_beta"] == pytest.approx(1 / rate)


@pytest.mark.timeout(1200)  # past the demo's own 900 s
def test_demo_on_namespaced_hosts_breaks_the_step_down(root_required):
    """The training demo on 2 namespaced hosts x 1 process x 2 devices, two shaped rails:
    it trains (jax_accl equal to jax.lax), its compiled step holds no XLA all-reduce, and
    process 0 prints where a step's time goes for both libraries."""
    done = subprocess.run(
        [sys.executable, "-m", "jax_accl.demo", "--hosts", "2", "--devices", "2"]
        + ["--steps", "8", "--breakdown", "3"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd="/",
        env={**os.environ, "XLA_FLAGS": ""},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    compiled = [line.split() for line in out.splitlines() if line.strip().startswith("jax_accl ")]
    # XLA all-reduce, reduce-scatter, all-gather, collective-permute, jax_accl calls
    hlo = next(r for r in compiled if len(r) == 6)
    assert hlo[1:5] == ["0", "0", "0", "0"] and int(hlo[5]) >= 1, out
    assert "2 namespaced hosts x 1 processes x 2 devices" in out, out
    assert "where a step's time goes" in out, out
    starts = ("jax_accl ", "jax.lax ")
    rows = [line.split() for line in out.splitlines() if line.strip().startswith(starts)]
    table = {r[0]: [float(v) for v in r[1:6]] for r in rows if len(r) >= 6 and r[1][0].isdigit()}
    assert set(table) == {"jax_accl", "jax.lax"}, out
    for step, compute, comm, total, longest in table.values():
        assert 0 < compute and 0 < comm and abs(total - compute - comm) < 0.05 and step > 0
        assert longest == max(compute, comm)


@pytest.mark.once  # the bench's table, whatever JAX's version (tests/conftest.py)
@pytest.mark.timeout(900)  # past the bench's own 600 s
def test_overlap_benchmark_across_processes():
    """bench --overlap on 2 processes x 2 devices: a row per library and process, times
    positive, the hidden share and the cores printed (every result checked in the run)."""
    done = bench(
        "--overlap",
        "--processes",
        "2",
        "--devices",
        "2",
        "--sizes",
        "256KiB",
        "--reps",
        "2",
        timeout=600,
    )
    rows = [r for r in map(str.split, done.stdout.splitlines()) if r and r[0] == "256KiB"]
    assert {(r[1], r[2]) for r in rows} == {
        (lib, proc) for lib in ("jax_accl", "jax.lax") for proc in ("0", "1")
    }, done.stdout
    for r in rows:
        assert all(float(v.rstrip("ms")) > 0 for v in r[4:8]), r


def test_training_as_two_processes():
    results = launch.run_job(
        ["-m", "jax_accl.demo", "--json", "--quiet"],
        2,
        4,
        extra=["--steps", "12", "--batch", "32"],
        env=[{"JAX_ACCL_TIMEOUT_S": "60"}] * 2,
    )
    for r in results:
        assert r["last_loss"] < 0.5 * r["first_loss"]
        assert r["max_param_difference"] < 1e-5
        # Across processes the gradients go in buckets (the first small, fusion.py), one
        # call each, the loss fused into the last: every call compiled is made, once.
        calls = r["compiled_step"]["jax_accl"]["jax_accl calls"]
        assert r["accl_calls_per_step_per_device"] == calls > 1
        assert r["compiled_step"]["jax_accl"]["xla all-reduce"] == 0
        assert r["compiled_step"]["jax.lax"]["jax_accl calls"] == 0


@pytest.mark.parametrize("strategy", ["fsdp", "pp"])
def test_sharded_training_as_two_processes_matches_one_process(strategy):
    """--strategy fsdp (pp) as 2 processes x 4 devices: jax_accl's losses are the
    one-process run's (the same 8-device mesh) to float rounding, no XLA collective in
    its step. The gloo run is reported, not asserted (jax-ml/jax#40830: its
    reduce-scatter is wrong now and then)."""
    from jax_accl.demo import strategies
    from jax_accl.demo import training as demo

    mesh = strategies.mesh_for(jax.devices(), strategy)
    want = demo.run(mesh, steps=10, batch_per_device=32, quiet=True, strategy=strategy)
    results = launch.run_job(
        ["-m", "jax_accl.demo", "--json", "--quiet"],
        2,
        4,
        extra=["--steps", "10", "--batch", "32", "--strategy", strategy],
        env=[{"JAX_ACCL_TIMEOUT_S": "60"}] * 2,
    )
    for r in results:
        np.testing.assert_allclose(r["losses"], want["losses"], rtol=1e-5)
        ours = r["compiled_step"]["jax_accl"]
        assert ours["xla all-gather"] == ours["xla reduce-scatter"] == 0, ours
        assert ours["xla collective-permute"] == 0, ours
        assert ours["xla all-reduce"] == 0 and ours["jax_accl calls"] > 0
    print("gloo's largest parameter difference:", [r["max_param_difference"] for r in results])


@pytest.mark.once  # the bench's table, whatever JAX's version (tests/conftest.py)
@pytest.mark.parametrize("hosts,rate", [(1, "300"), (2, "300"), (2, "0")])
def test_collectives_bench_across_processes_and_hosts(hosts, rate, request):
    """python -m jax_accl.bench.collectives as 2 processes (jax.lax over gloo), on one
    host and on 2 namespaced hosts with shaped rails (then with the network limit), and
    unshaped (the limit at the wire test's rate; the all-to-all forced direct and by host):
    every op's row, results checked against gloo's by the workers, CPU per op summed."""
    if hosts > 1:
        request.getfixturevalue("root_required")
    unshaped = rate == "0"
    ops = ["--ops", "all_to_all", "--a2a-schedules", "direct,hierarchical"] if unshaped else []
    done = subprocess.run(
        [sys.executable, "-m", "jax_accl.bench.collectives", "--processes", "2", "--devices", "2"]
        + ["--hosts", str(hosts), "--sizes", "64KiB", "--reps", "1", "--rate-mbit", rate, *ops],
        capture_output=True,
        text=True,
        timeout=600,
        cwd="/",  # the installed package, not the source tree
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [r.split() for r in done.stdout.splitlines() if not r.startswith("#")]
    assert [r[0] for r in rows] == (
        ["all_to_all:direct", "all_to_all:hierarchical"]
        if unshaped
        else ["scatter+gather", "reduce_scatter", "all_gather", "ppermute", "all_to_all"]
    )
    if unshaped:
        assert re.search(r"the wire each way at once: rail0 [\d.]+ GB/s", done.stdout), done.stdout
    for r in rows:
        assert r[1] == "64KiB" and float(r[3]) > 0 and r[5].endswith("x")
        # The limit (memory's on one host, network's across), the share, CPU us accl and lax.
        assert len(r) == 10, r
        assert float(r[6]) > 0 and r[7].endswith("x"), r
        assert float(r[8]) > 0 and float(r[9]) > 0, r
