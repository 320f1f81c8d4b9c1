"""The wire between hosts a calibration stores (jax_accl.cost_model) and the rails a job
stripes over by it (jax_accl.rails.paying): the rules, without a job. The job's side
(process 0's wire for every process) is tests/multiprocess/test_multiprocess.py's."""

import json

import pytest

from jax_accl import _accl, config, cost_model, rails

RAILS = [("rail0", "10.0.0.1", 1.0), ("rail1", "10.1.0.1", 1.0)]


def wire(one=1e9, together=1e9, count=2, alpha=40e-6):
    return {
        "rails": count,
        "one_rail_bytes_per_s": one,
        "all_rails_bytes_per_s": together,
        "net_alpha": alpha,
    }


@pytest.fixture
def model():
    saved = _accl.get_cost_model()
    yield
    _accl.set_cost_model(**saved)


def test_rails_that_carry_no_more_together_are_left_for_the_first(monkeypatch):
    monkeypatch.delenv("JAX_ACCL_RAIL_CHOICE", raising=False)
    used, why = rails.paying(RAILS, wire(together=1.05e9))
    assert used == RAILS[:1]
    assert "1.05x one rail's" in why and "rail0 only" in why and "JAX_ACCL_RAIL_CHOICE=all" in why
    assert rails.paying(RAILS, wire(together=1.2e9)) == (RAILS, "")  # they pay: every rail


@pytest.mark.parametrize(
    "case",
    ["no calibration", "another rail count", "one rail", "choice all"],
)
def test_every_rail_is_kept_where_the_calibration_does_not_speak_for_them(monkeypatch, case):
    monkeypatch.delenv("JAX_ACCL_RAIL_CHOICE", raising=False)
    stored, given = wire(together=0.9e9), RAILS
    if case == "no calibration":
        stored = None
    elif case == "another rail count":
        stored = wire(together=0.9e9, count=3)
    elif case == "one rail":
        given = RAILS[:1]
    else:
        monkeypatch.setenv("JAX_ACCL_RAIL_CHOICE", "all")
    assert rails.paying(given, stored) == (given, "")


def test_a_rail_choice_that_is_not_known_is_refused(tmp_path, monkeypatch, model):
    monkeypatch.setenv("JAX_ACCL_RAIL_CHOICE", "some")
    with pytest.raises(ValueError, match="JAX_ACCL_RAIL_CHOICE"):
        config.value("JAX_ACCL_RAIL_CHOICE")
    # Loading the model says so too, not that the stored file is bad.
    monkeypatch.setenv("JAX_ACCL_CACHE", str(tmp_path))
    (tmp_path / "cost_model.json").write_text(json.dumps({"wire": wire()}))
    with pytest.raises(ValueError, match="JAX_ACCL_RAIL_CHOICE"):
        cost_model.load()


def test_the_model_takes_the_rate_of_the_rails_in_use():
    w = wire(one=2e9, together=3e9, alpha=50e-6)
    assert cost_model.wire_constants(w, 2) == {"net_alpha": 50e-6, "net_beta": 2 / 3e9}
    assert cost_model.wire_constants(w, 1) == {"net_alpha": 50e-6, "net_beta": 1 / 2e9}
    assert cost_model.wire_constants(w, 4)["net_beta"] == 1 / 2e9  # not what was measured


def test_a_stored_wire_is_loaded_over_the_rails_a_job_would_use(tmp_path, monkeypatch, model):
    monkeypatch.setenv("JAX_ACCL_CACHE", str(tmp_path))
    monkeypatch.delenv("JAX_ACCL_LINK_GBITS", raising=False)
    monkeypatch.delenv("JAX_ACCL_RAIL_CHOICE", raising=False)
    (tmp_path / "cost_model.json").write_text(json.dumps({"wire": wire(2e9, 2.1e9, 2, 30e-6)}))
    cost_model.load()  # together 1.05x: one rail's rate
    assert _accl.get_cost_model()["net_beta"] == pytest.approx(1 / 2e9)
    assert _accl.get_cost_model()["net_alpha"] == pytest.approx(30e-6)
    (tmp_path / "cost_model.json").write_text(json.dumps({"wire": wire(2e9, 3.6e9, 2, 30e-6)}))
    cost_model.load()  # they pay: each rail's share of what they carry together
    assert _accl.get_cost_model()["net_beta"] == pytest.approx(2 / 3.6e9)
    assert cost_model.stored_wire()["all_rails_bytes_per_s"] == 3.6e9


def test_a_stated_wire_wins_over_a_stored_one(tmp_path, monkeypatch, model):
    monkeypatch.setenv("JAX_ACCL_CACHE", str(tmp_path))
    monkeypatch.setenv("JAX_ACCL_LINK_GBITS", "0.3")
    (tmp_path / "cost_model.json").write_text(json.dumps({"wire": wire(2e9, 2e9, 2, 30e-6)}))
    assert cost_model.stored_wire() is None  # process 0 publishes none: every rail
    before = _accl.get_cost_model()["net_alpha"]
    cost_model.load()
    assert _accl.get_cost_model()["net_beta"] == pytest.approx(8 / 0.3e9)
    assert _accl.get_cost_model()["net_alpha"] == before


@pytest.mark.parametrize(
    "broken", [{"rails": 2}, wire(one=0), {**wire(), "net_alpha": "fast"}, ["not", "a", "dict"]]
)
def test_a_stored_wire_that_cannot_be_used_is_reported_and_ignored(tmp_path, monkeypatch, broken):
    monkeypatch.setenv("JAX_ACCL_CACHE", str(tmp_path))
    monkeypatch.delenv("JAX_ACCL_LINK_GBITS", raising=False)
    (tmp_path / "cost_model.json").write_text(json.dumps({"wire": broken}))
    with pytest.warns(UserWarning, match="ignoring .*cost_model.json: the wire"):
        assert cost_model.stored_wire() is None


def test_loading_a_wire_that_cannot_be_used_reports_the_file(tmp_path, monkeypatch, model):
    monkeypatch.setenv("JAX_ACCL_CACHE", str(tmp_path))
    monkeypatch.delenv("JAX_ACCL_LINK_GBITS", raising=False)
    (tmp_path / "cost_model.json").write_text(json.dumps({"wire": wire(one=0)}))
    with pytest.warns(UserWarning, match="--calibrate` again"):
        assert cost_model.load() is None
