"""Where a measured ratio may mislead, the demo and the bench say so beside it: the
machine's load above its cores (os.getloadavg against os.cpu_count), and the --jit
demo's all-reduce timed alone beside the step (not like for like)."""

import argparse
import os

from jax_accl.bench import load, report
from jax_accl.demo import jit_training


def test_a_load_above_the_cores_is_named(monkeypatch):
    cores = os.cpu_count() or 1
    monkeypatch.setattr(os, "getloadavg", lambda: (cores + 6.0, 0.0, 0.0))
    note = load.busy_note()
    assert f"load was {cores + 6.0:.1f} on {cores} cores" in note and "mislead" in note
    monkeypatch.setattr(os, "getloadavg", lambda: (cores - 0.5, 0.0, 0.0))
    assert load.busy_note() == ""


def test_the_bench_table_carries_the_note(monkeypatch, capsys):
    monkeypatch.setattr(os, "getloadavg", lambda: (1000.0, 0.0, 0.0))
    row = {
        "size_bytes": 4096,
        "variant": "accl:auto",
        "seconds_per_op": 1e-4,
        "algbw_gbs": 1.0,
        "busbw_gbs": 1.0,
        "speedup_vs_baseline": 0.66,
        "single_call_s": 1e-4,
    }
    report.print_rows([row], [], None)
    assert "# note: the machine's load was 1000.0" in capsys.readouterr().out


def test_the_jit_demo_says_its_two_ratios_are_not_like_for_like(monkeypatch):
    monkeypatch.setattr(os, "getloadavg", lambda: (1000.0, 0.0, 0.0))
    run = {
        "allreduce_bytes": 1 << 20,
        "sample": [0.0],
        "losses": [1.0],
        "accuracy": 0.9,
        "compiled_step": {},
        "calls_per_step": {},
        "step_seconds": 0.01,
        "allreduce_seconds": 0.002,
    }
    args = argparse.Namespace(hosts=1, processes=2, devices=1, strategy="dp", batch=8, steps=2)
    lines = jit_training.report(args, {"jax_accl": run, "gloo": dict(run)})
    assert any("not like for like" in line for line in lines)
    assert any("load was 1000.0" in line for line in lines)
