"""The one-host choice by measured times (bench --calibrate): interpolation between the
grid's sizes, the largest size's winner above it, the model where a shape or a
candidate was not measured, and clear errors for a malformed table."""
import pytest

from jax_accl import _accl

SIZES = [1 << 10, 1 << 14, 1 << 18]
# Ring fastest at the smallest size, halving-doubling in the middle, cross-memory
# attach at the largest; direct never.
TIMES = {"direct": [100e-6, 400e-6, 9e-3], "ring": [50e-6, 300e-6, 3e-3],
         "halving_doubling": [60e-6, 120e-6, 2e-3], "reduce_broadcast": [200e-6, 250e-6, 1e-3]}


@pytest.fixture
def measured():
    _accl.set_measured_one_host(4, 2, SIZES, TIMES)
    yield
    _accl.clear_measured_one_host()


def test_interpolates_linearly_between_sizes_and_scales_above(measured):
    assert _accl.measured_one_host(4, 2, "ring", 1 << 10) == pytest.approx(50e-6)
    assert _accl.measured_one_host(4, 2, "ring", 100) == pytest.approx(50e-6)
    middle = (SIZES[0] + SIZES[1]) // 2
    assert _accl.measured_one_host(4, 2, "ring", middle) == pytest.approx(175e-6)
    assert _accl.measured_one_host(4, 2, "ring", 1 << 20) == pytest.approx(12e-3)
    assert _accl.measured_one_host(2, 4, "ring", 1 << 10) is None  # another shape


def test_choice_follows_the_measured_times(measured):
    assert _accl.choose_one_host(4, 2, 1 << 10, True) == "ring"
    assert _accl.choose_one_host(4, 2, 1 << 14, True) == "halving_doubling"
    assert _accl.choose_one_host(4, 2, 1 << 18, True) == "reduce_broadcast"
    assert _accl.choose_one_host(4, 2, 64 << 20, True) == "reduce_broadcast"
    # Without cross-memory attach the fourth candidate is the hierarchy, not measured
    # here: the model decides, as it does for a shape without measurements.
    for size in SIZES:
        _accl.clear_measured_one_host()
        model = (_accl.choose_one_host(4, 2, size, False), _accl.choose_one_host(2, 4, size, True))
        _accl.set_measured_one_host(4, 2, SIZES, TIMES)
        assert (_accl.choose_one_host(4, 2, size, False),
                _accl.choose_one_host(2, 4, size, True)) == model


def test_forgetting_a_shape_returns_to_the_model(measured):
    _accl.set_measured_one_host(4, 2, [], {})
    assert _accl.measured_one_host(4, 2, "ring", 1 << 10) is None


@pytest.mark.parametrize("sizes,times,message", [
    ([1 << 14, 1 << 10], {"ring": [1.0, 2.0]}, "must increase"),
    (SIZES, {"ring": [1.0, 2.0]}, "ring: one per size"),
    (SIZES, {"bogus": [1.0, 2.0, 3.0]}, "bogus"),
])
def test_a_malformed_table_is_refused(sizes, times, message):
    with pytest.raises(ValueError, match=message):
        _accl.set_measured_one_host(4, 2, sizes, times)
    assert _accl.measured_one_host(4, 2, "ring", 1 << 10) is None
