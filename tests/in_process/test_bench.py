"""The benchmark command: rows checked and written as JSON lines, the busbw plot, and
--calibrate storing this machine's cost-model constants (which import then loads)."""
import json
import os
import subprocess
import sys


def bench(*args, env=None):
    done = subprocess.run([sys.executable, "-m", "jax_accl.bench", *args], capture_output=True,
                          text=True, timeout=300, cwd="/",
                          env={**os.environ, "XLA_FLAGS": "", **(env or {})})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def test_sweep_writes_json_lines_and_a_plot(tmp_path):
    out = bench("--devices", "4", "--sizes", "4KiB,64KiB", "--algorithms", "auto,direct",
                "--reps", "1", "--loop", "2", "--json", str(tmp_path / "rows.jsonl"),
                "--plot", str(tmp_path / "busbw.png"))
    rows = [json.loads(line) for line in open(tmp_path / "rows.jsonl")]
    assert {r["variant"] for r in rows} == {"jax.lax.psum", "accl:auto", "accl:direct"}
    assert all(r["busbw_gbs"] > 0 and r["seconds_per_op"] > 0 for r in rows)
    assert open(tmp_path / "busbw.png", "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    assert "auto" in out and "the best forced" in out


def test_calibrate_stores_constants_that_import_loads(tmp_path):
    env = {"JAX_ACCL_CACHE": str(tmp_path)}
    bench("--devices", "4", "--calibrate", env=env)
    stored = json.loads((tmp_path / "cost_model.json").read_text())
    assert set(stored) == {"alpha", "beta", "gamma", "net_alpha", "net_beta"}
    assert all(v > 0 for v in stored.values())
    loaded = subprocess.run(
        [sys.executable, "-c", "import jax_accl; from jax_accl import _accl; "
         "print(_accl.get_cost_model())"], capture_output=True, text=True, cwd="/",
        env={**os.environ, **env}, timeout=120)
    assert loaded.returncode == 0, loaded.stderr
    assert eval(loaded.stdout)[:3] == [stored["alpha"], stored["beta"], stored["gamma"]]
