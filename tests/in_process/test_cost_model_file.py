"""The stored cost model ($JAX_ACCL_CACHE/cost_model.json) as jax_accl.cost_model reads
it: what is not a regular file of this user, or holds a value the planner cannot use
(not finite, a rate or time not positive, garbage), is one warning and the built-in
model, never a hang or an error in every lowering."""

import json
import os
import threading

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax_accl
from jax_accl import _accl, cost_model


@pytest.fixture
def model(tmp_path, monkeypatch):
    """This test's JAX_ACCL_CACHE, the built-in model before and restored after, and
    the file loaded again at the next lowered call."""
    saved = _accl.get_cost_model()
    monkeypatch.setenv("JAX_ACCL_CACHE", str(tmp_path))
    monkeypatch.delenv("JAX_ACCL_LINK_GBITS", raising=False)
    monkeypatch.setattr(cost_model, "_loaded", False)
    _accl.set_cost_model(**_accl.default_cost_model())
    yield tmp_path / "cost_model.json"
    _accl.set_cost_model(**saved)
    _accl.clear_measured_one_host()


def within(seconds, f):
    """f() in a thread: its result, or a failure (not a hang) after `seconds`."""
    out = {}
    thread = threading.Thread(target=lambda: out.update(value=f()), daemon=True)
    thread.start()
    thread.join(seconds)
    return thread.is_alive(), out.get("value")


def fused_psum(mesh8):
    """Two psums fused into one call (its buckets sized by the model's alpha/beta), exact."""
    x = jax.device_put(
        np.arange(8 * 4, dtype=np.float32).reshape(8, 4), NamedSharding(mesh8, P("i"))
    )
    f = jax.jit(
        jax.shard_map(
            lambda a, b: (jax_accl.psum(a, "i"), jax_accl.psum(b, "i")),
            mesh=mesh8,
            in_specs=(P("i"), P("i")),
            out_specs=(P(), P()),
        )
    )
    a, b = f(x, 2 * x)
    want = np.asarray(x).sum(0, keepdims=True)
    np.testing.assert_array_equal(a, want)
    np.testing.assert_array_equal(b, 2 * want)
    return True


def test_a_named_pipe_warns_and_the_call_runs(model, mesh8):
    os.mkfifo(model)  # opening it to read would wait for a writer forever
    try:
        with pytest.warns(UserWarning, match=f"ignoring {model}.*not a regular file"):
            hung, ran = within(30, lambda: fused_psum(mesh8))
    finally:
        # A reader blocked in open() is let go by a writer, so a failing run ends.
        fd = os.open(model, os.O_WRONLY | os.O_NONBLOCK) if hung else None
        if fd is not None:
            os.close(fd)
    assert not hung, "loading the cost model blocked on a named pipe"
    assert ran
    assert _accl.get_cost_model() == _accl.default_cost_model()


def test_a_zero_rate_warns_and_the_call_runs(model, mesh8):
    model.write_text(json.dumps({"alpha": 2e-5, "beta": 0}))
    with pytest.warns(UserWarning, match=f"ignoring {model}.*beta"):
        assert fused_psum(mesh8)
    assert _accl.get_cost_model() == _accl.default_cost_model()


GOOD_LINE = {"latency": 1e-4, "per_byte": 1e-9}


@pytest.mark.parametrize(
    "text,why",
    [
        ('{"beta": NaN}', "beta"),
        ('{"gamma": Infinity}', "gamma"),
        ('{"shm_alpha": -1e-6}', "shm_alpha"),
        ('{"net_beta": 0.0}', "net_beta"),
        ('{"alpha": true}', "alpha"),
        ('{"cma_beta": "fast"}', "cma_beta"),
        ('{"beta": 1' + "0" * 400 + "}", "beta"),
        (
            '{"wire": {"rails": 1, "one_rail_bytes_per_s": 0, "all_rails_bytes_per_s": 1e9,'
            ' "net_alpha": 1e-5}}',
            "wire",
        ),
        (
            json.dumps({"one_host": {"2x2": {"ring": {**GOOD_LINE, "latency": float("nan")}}}}),
            "2x2",
        ),
        (json.dumps({"one_host": {"two": {"ring": GOOD_LINE}}}), "two"),
        ("[1, 2]", "not an object"),
        ("{not json", "JSON"),
        ("[" * 100000, "JSON"),
        (b"\xff\xfe", "JSON"),
    ],
    ids=[
        "nan",
        "inf",
        "negative",
        "zero net_beta",
        "bool",
        "text",
        "huge int",
        "zero wire",
        "nan line",
        "bad shape",
        "list",
        "garbage",
        "deep",
        "not utf-8",
    ],
)
def test_a_value_the_planner_cannot_use_warns_once_and_the_model_is_the_built_in(model, text, why):
    model.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.warns(UserWarning, match=f"ignoring {model}.*{why}") as said:
        assert cost_model.load() is None
        assert cost_model.stored_wire() is None  # what process 0 would publish
    assert len([w for w in said if str(model) in str(w.message)]) == 1
    assert _accl.get_cost_model() == _accl.default_cost_model()
    assert _accl.measured_one_host(2, 2, "ring", 1024) is None


def test_a_file_of_another_user_or_not_a_file_is_not_read(model):
    model.write_text(json.dumps({"alpha": 3e-5}))
    os.chown(model, os.getuid() + 4242, -1)
    with pytest.warns(UserWarning, match=f"ignoring {model}.*owned by uid {os.getuid() + 4242}"):
        assert cost_model.load() is None
    assert _accl.get_cost_model()["alpha"] == _accl.default_cost_model()["alpha"]
    model.unlink()
    model.mkdir()
    with pytest.warns(UserWarning, match=f"ignoring {model}.*not a regular file"):
        assert cost_model.load() is None


def test_a_good_file_is_applied_over_the_built_in_model(model):
    lines = {a: GOOD_LINE for a in ("direct", "ring", "halving_doubling", "reduce_broadcast")}
    model.write_text(json.dumps({"alpha": 3e-5, "net_step_bytes": 0, "one_host": {"2x2": lines}}))
    assert cost_model.load()["alpha"] == 3e-5
    got = _accl.get_cost_model()
    assert got == {**_accl.default_cost_model(), "alpha": 3e-5, "net_step_bytes": 0.0}
    assert _accl.measured_one_host(2, 2, "ring", 1024) == pytest.approx(1e-4 + 1024e-9)
