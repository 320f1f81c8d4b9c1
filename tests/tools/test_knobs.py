"""The knobs cannot be got wrong silently: a JAX_ACCL_* variable that is no knob is
named with the closest knob, and a value a knob cannot read is an error naming what it
accepts (jax_accl/config.py)."""

import pytest

from jax_accl import config

# A value no knob with a parser of its own accepts.
UNREADABLE = "@@"


def test_a_misspelt_knob_is_named_with_the_closest():
    warned = config.misspelt({"JAX_ACCL_TIMEOUT": "5", "JAX_ACCL_XLA_COLLECTIVE": "1"})
    assert len(warned) == 2
    assert "JAX_ACCL_TIMEOUT is not a jax_accl knob" in warned[0]
    assert "did you mean JAX_ACCL_TIMEOUT_S?" in warned[0]
    assert "did you mean JAX_ACCL_XLA_COLLECTIVES?" in warned[1]


def test_knobs_and_other_variables_are_not_warned_of():
    environ = {name: "" for name in config.KNOBS} | {"JAX_ACCL_SOAK": "full", "PATH": "/"}
    assert config.misspelt(environ) == []


# The knobs whose value is any text (an interface list resolve() checks, a host id, a path).
FREE_TEXT = ("JAX_ACCL_RAILS", "JAX_ACCL_HOST_ID", "JAX_ACCL_CACHE")


@pytest.mark.parametrize("name", [name for name in config.KNOBS if name not in FREE_TEXT])
def test_an_unreadable_value_names_what_the_knob_accepts(monkeypatch, name):
    monkeypatch.setenv(name, UNREADABLE)
    with pytest.raises(ValueError, match=rf"^{name}='@@': expected "):
        config.value(name)


@pytest.mark.parametrize(
    "name, text",
    [("JAX_ACCL_TIMEOUT_S", "-1"), ("JAX_ACCL_SPIN_US", "1.5"), ("JAX_ACCL_FUSION_BYTES", "0")],
)
def test_a_number_out_of_range_names_the_range(monkeypatch, name, text):
    monkeypatch.setenv(name, text)
    with pytest.raises(ValueError, match="expected "):
        config.value(name)
