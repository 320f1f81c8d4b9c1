"""The one-host choice by calibrated lines (bench --calibrate): the least line wins, the
model decides where a shape or a candidate has none, and malformed lines are refused."""

import pytest

from jax_accl import _accl

# Ring cheapest to start (latency), halving-doubling in the middle, cross-memory attach
# for large buffers (per byte); direct never.
LINES = {
    "direct": (40e-6, 8e-9),
    "ring": (20e-6, 2e-9),
    "halving_doubling": (30e-6, 1.5e-9),
    "reduce_broadcast": (150e-6, 0.5e-9),
}


@pytest.fixture
def calibrated():
    _accl.set_measured_one_host(4, 2, LINES)
    yield
    _accl.clear_measured_one_host()


def test_a_line_is_latency_plus_bytes_times_per_byte(calibrated):
    assert _accl.measured_one_host(4, 2, "ring", 0) == pytest.approx(20e-6)
    assert _accl.measured_one_host(4, 2, "ring", 1 << 20) == pytest.approx(20e-6 + 2e-9 * (1 << 20))
    assert _accl.measured_one_host(2, 4, "ring", 1 << 10) is None  # another shape


def test_choice_follows_the_least_line(calibrated):
    assert _accl.choose_one_host(4, 2, 1 << 10, True) == "ring"  # 22 us
    assert _accl.choose_one_host(4, 2, 64 << 10, True) == "halving_doubling"  # 128 us
    assert _accl.choose_one_host(4, 2, 1 << 20, True) == "reduce_broadcast"  # 674 us
    # Without cross-memory attach the fourth candidate is the hierarchy, which has no
    # line here: the model decides, as it does for a shape without lines.
    for size in (1 << 10, 64 << 10, 1 << 20):
        _accl.clear_measured_one_host()
        model = (_accl.choose_one_host(4, 2, size, False), _accl.choose_one_host(2, 4, size, True))
        _accl.set_measured_one_host(4, 2, LINES)
        assert (
            _accl.choose_one_host(4, 2, size, False),
            _accl.choose_one_host(2, 4, size, True),
        ) == model


def test_forgetting_a_shape_returns_to_the_model(calibrated):
    _accl.set_measured_one_host(4, 2, {})
    assert _accl.measured_one_host(4, 2, "ring", 1 << 10) is None


@pytest.mark.parametrize(
    "lines,message",
    [
        ({"ring": (-1e-6, 1e-9)}, "ring: coefficients must be finite and >= 0"),
        ({"ring": (1e-6, float("inf"))}, "ring: coefficients must be finite"),
        ({"bogus": (1e-6, 1e-9)}, "bogus"),
    ],
)
def test_malformed_lines_are_refused(lines, message):
    with pytest.raises(ValueError, match=message):
        _accl.set_measured_one_host(4, 2, lines)
    assert _accl.measured_one_host(4, 2, "ring", 1 << 10) is None
