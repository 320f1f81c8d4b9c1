"""The calibration's fit of the one-host constants: it recovers the constants that made
the times, keeps the ones the measured shapes cannot tell apart, and the stored file
round-trips (constants and calibrated lines) through load(), which the first lowered
call runs, not the import; lines fitted to measured times."""

import json
import os
import subprocess
import sys

import pytest

from jax_accl import _accl, cost_model
from jax_accl.bench import calibrate

TRUE = {"shm_alpha": 6e-6, "shm_process_alpha": 21e-6, "shm_beta": 0.7e-9, "cma_beta": 1.3e-9}


@pytest.fixture
def model():
    saved = _accl.get_cost_model()
    yield
    _accl.set_cost_model(**saved)
    _accl.clear_measured_one_host()


def times_of(shapes):
    """What machine TRUE would measure at every shape, candidate and grid size."""
    _accl.set_cost_model(**TRUE)
    points = [
        (p, k, a, size)
        for p, k in shapes
        for a in calibrate.ONE_HOST_ALGORITHMS
        for size in calibrate.ONE_HOST_SIZES
    ]
    measured = [(*point, t) for point, t in zip(points, calibrate.predicted(points))]
    _accl.set_cost_model(shm_alpha=1e-6, shm_process_alpha=1e-6, shm_beta=1e-9, cma_beta=1e-9)
    return measured


def test_fit_recovers_the_constants_behind_the_times(model):
    fitted = calibrate.fit_one_host(times_of([(2, 4), (4, 2), (8, 1)]))
    assert fitted == pytest.approx(TRUE, rel=1e-6)


def test_a_constant_the_shapes_cannot_tell_keeps_its_value(model):
    # 8 x 1: every message step crosses processes, so the step within one is not seen.
    fitted = calibrate.fit_one_host(times_of([(8, 1)]))
    assert set(fitted) == set(TRUE) - {"shm_alpha"}
    assert fitted == pytest.approx({k: TRUE[k] for k in fitted}, rel=1e-6)


def test_store_merges_and_load_applies(model, tmp_path, monkeypatch):
    monkeypatch.setenv("JAX_ACCL_CACHE", str(tmp_path))
    lines = {
        "ring": {"latency": 1e-4, "per_byte": 1e-9, "measured": [[1024, 1.01e-4]]},
        "direct": {"latency": 5e-5, "per_byte": 1e-8, "measured": [[1024, 6e-5]]},
    }
    cost_model.store({"alpha": 3e-5, "one_host": {"4x2": lines}})
    cost_model.store({"shm_beta": 2e-9, "one_host": {"8x1": lines}})
    stored = json.loads((tmp_path / "cost_model.json").read_text())
    assert stored["alpha"] == 3e-5 and stored["shm_beta"] == 2e-9
    assert set(stored["one_host"]) == {"4x2", "8x1"}
    _accl.set_cost_model(alpha=1.0, shm_beta=1.0)
    _accl.clear_measured_one_host()
    assert cost_model.load() == stored
    assert _accl.get_cost_model()["alpha"] == 3e-5 and _accl.get_cost_model()["shm_beta"] == 2e-9
    assert _accl.measured_one_host(8, 1, "direct", 4096) == pytest.approx(5e-5 + 4096e-8)


def test_a_line_through_exact_times_is_found_and_an_outlier_barely_moves_it():
    sizes = list(calibrate.ONE_HOST_SIZES)
    exact = [(b, 80e-6 + b * 1.5e-9) for b in sizes]
    assert calibrate.fit_line(exact) == pytest.approx((80e-6, 1.5e-9), rel=1e-6)
    # One small size timed at a third of the truth (the difference of two noisy
    # timings): the latency stays within 10%, the per-byte cost within 2%.
    noisy = [(b, t / 3 if b == 4096 else t) for b, t in exact]
    latency, per_byte = calibrate.fit_line(noisy)
    assert latency == pytest.approx(80e-6, rel=0.1) and per_byte == pytest.approx(1.5e-9, rel=0.02)
    # Times falling with size (noise at one size only): no negative per-byte cost.
    assert calibrate.fit_line([(1024, 2e-4), (4096, 1e-4)])[1] == 0.0


def test_unknown_or_negative_constants_are_refused(model):
    with pytest.raises(ValueError, match="unknown cost-model constant: bogus"):
        _accl.set_cost_model(bogus=1.0)
    with pytest.raises(ValueError, match="shm_beta must be finite"):
        _accl.set_cost_model(shm_beta=-1.0)


def test_a_file_that_cannot_be_applied_is_named_in_a_warning(model, tmp_path, monkeypatch):
    monkeypatch.setenv("JAX_ACCL_CACHE", str(tmp_path))
    path = tmp_path / "cost_model.json"
    path.write_text(
        '{"alpha": 1e-5, "one_host": {"4x2": {"bogus": {"latency": 0, "per_byte": 0}}}}'
    )
    with pytest.warns(UserWarning, match=f"ignoring {path}.*bogus"):
        assert cost_model.load() is None
    assert _accl.measured_one_host(4, 2, "ring", 1024) is None
    path.write_text("{not json")
    with pytest.warns(UserWarning, match=f"ignoring {path}"):
        assert cost_model.load() is None


# A fresh process that notes `before` (a Python expression), lowers one jax_accl call,
# and prints `before` and `after`.
LOWER_ONE_CALL = (
    "import jax, jax_accl\n"
    "from jax_accl import _accl\n"
    "before = {before}\n"
    "mesh = jax.sharding.Mesh(jax.devices()[:2], ('i',))\n"
    "f = jax.jit(jax_accl.shard_map(lambda x: jax_accl.psum(x, 'i'), mesh=mesh,\n"
    "            in_specs=jax.P('i'), out_specs=jax.P()))\n"
    "f.lower(jax.numpy.ones(4)).compile()\n"
    "print(before, {after})\n"
)


def around_the_first_lowered_call(tmp_path, stored: dict, before: str, after: str, **env):
    (tmp_path / "cost_model.json").write_text(json.dumps(stored))
    done = subprocess.run(
        [sys.executable, "-c", LOWER_ONE_CALL.format(before=before, after=after)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(tmp_path),
        env={**os.environ, "JAX_ACCL_CACHE": str(tmp_path), **env},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.multiprocess  # a fresh process
def test_the_first_lowered_call_loads_the_stored_constants_not_the_import(tmp_path):
    printed = around_the_first_lowered_call(
        tmp_path,
        {"alpha": 1.25e-3},
        "_accl.get_cost_model()['alpha']",
        "_accl.get_cost_model()['alpha']",
    )
    before, after = (float(v) for v in printed)
    assert before != 1.25e-3 and after == 1.25e-3


@pytest.mark.multiprocess  # a fresh process
def test_the_wire_the_environment_states_is_the_models_over_the_stored_one(tmp_path):
    """JAX_ACCL_LINK_GBITS: the model's net_beta from the first lowered call on, over a
    calibration's; and the pipeline between hosts chooses its chunks by it."""
    beta, chunks = around_the_first_lowered_call(
        tmp_path,
        {"net_beta": 1e-9},
        "''",
        "_accl.get_cost_model()['net_beta'], _accl.pipeline_chunks(2, 2, 2, 2, 4 << 20)",
        JAX_ACCL_LINK_GBITS="0.285",
    )
    assert float(beta) == pytest.approx(8 / 0.285e9) and int(chunks) == 12
