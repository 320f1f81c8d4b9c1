"""The benchmark across processes on one host: gloo psum, jax_accl and the MPI baseline
(mpi4jax over Open MPI, installed by scripts/install_mpi.sh, which the test command runs)
in one table, every row checked against NumPy by the workers."""
import json
import os
import subprocess
import sys


def test_processes_table_has_gloo_accl_and_mpi_rows(tmp_path):
    rows_path = tmp_path / "rows.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "jax_accl.bench", "--processes", "2", "--devices", "2",
         "--sizes", "64KiB,512KiB", "--algorithms", "auto,ring", "--reps", "1", "--loop", "2",
         "--mpi", "on", "--json", str(rows_path)],
        capture_output=True, text=True, timeout=600, cwd="/",
        env={**os.environ, "XLA_FLAGS": ""})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [json.loads(line) for line in open(rows_path)]
    assert [(r["size_bytes"], r["variant"]) for r in rows] == [
        (size, variant) for size in (64 << 10, 512 << 10)
        for variant in ("jax.lax.psum", "accl:auto", "accl:ring", "mpi4jax")]
    for r in rows:
        assert r["devices"] == 4
        assert r["seconds_per_op"] > 0 and r["busbw_gbs"] > 0 and r["memory_limit_s"] > 0
    assert "jax_accl auto is" in done.stdout and "4 processes x 1 device" in done.stdout
