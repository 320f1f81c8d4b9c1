"""Native tier: disagreement between ranks and absent ranks are errors on every rank,
raised within the timeout, and leave nothing behind."""

import time

import numpy as np
import pytest

from jax_accl import AcclError, _accl
from jax_accl.testing.threads import allreduce_threads


def test_shape_mismatch_fails_on_every_rank():
    inputs = [np.ones(10, np.float32), np.ones(12, np.float32), np.ones(10, np.float32)]
    with pytest.raises(AcclError) as info:
        allreduce_threads(inputs, "sum", "ring")
    assert set(info.value.rank_errors) == {0, 1, 2}
    for message in info.value.rank_errors.values():
        assert "ranks disagree" in message and "rank 1 calls sum of 12 x float32" in message
    assert _accl.pending_calls() == 0


def test_dtype_and_op_mismatch_fail_on_every_rank():
    with pytest.raises(AcclError, match="rank 1 calls sum of 4 x int32") as info:
        allreduce_threads([np.ones(4, np.float32), np.ones(4, np.int32)], "sum", "direct")
    assert set(info.value.rank_errors) == {0, 1}
    with pytest.raises(AcclError, match="rank 1 calls max") as info:
        allreduce_threads([np.ones(4, np.float32)] * 2, ops=["sum", "max"])
    assert set(info.value.rank_errors) == {0, 1}
    with pytest.raises(AcclError, match="halving_doubling"):
        allreduce_threads([np.ones(4, np.float32)] * 2, algorithms=["ring", "halving_doubling"])


@pytest.mark.parametrize("algorithm", ["direct", "ring", "halving_doubling", "reduce_broadcast"])
def test_missing_rank_times_out_naming_it(algorithm):
    inputs = [np.ones(100, np.float32) for _ in range(4)]
    start = time.monotonic()
    with pytest.raises(AcclError) as info:
        allreduce_threads(inputs, "sum", algorithm, timeout_s=0.5, present=[0, 1, 3])
    elapsed = time.monotonic() - start
    assert set(info.value.rank_errors) == {0, 1, 3}
    for message in info.value.rank_errors.values():
        assert "timeout" in message and "ranks [2]" in message
    assert elapsed < 10, "the deadline must bound the wait"
    assert _accl.pending_calls() == 0


def test_unknown_names_are_rejected():
    with pytest.raises(ValueError, match="unknown algorithm"):
        allreduce_threads([np.ones(2, np.float32)] * 2, "sum", "bogus")
    with pytest.raises(ValueError, match="unknown reduce op"):
        allreduce_threads([np.ones(2, np.float32)] * 2, "mean")


def test_many_calls_after_errors_still_work():
    for _ in range(50):
        xs = [np.full(33, r, np.int64) for r in range(3)]
        for out in allreduce_threads(xs, "sum", "ring"):
            np.testing.assert_array_equal(out, np.full(33, 3, np.int64))
