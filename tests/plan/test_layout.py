"""The planner's tiers (jax_accl.plan.layout) against the runtime's (topology/group_layout,
through the binding): the same groups and owners for every layout."""

import pytest

from jax_accl import _accl_testing
from jax_accl.plan import layout

LAYOUTS = [
    [[2], [2]],
    [[1, 1], [1, 1]],
    [[1, 1], [1, 1], [1, 1]],
    [[2, 2], [2, 2]],
    [[2, 1], [2], [1]],
    [[3], [1, 1]],
    [[1, 2, 1]],
    [[4, 4], [4, 4], [4, 4]],
    [[1]],
    [[8]] * 5,
]


@pytest.mark.parametrize("per_host", LAYOUTS, ids=str)
def test_group_layout_equals_the_runtime(per_host):
    places = layout.places_of(per_host)
    native = _accl_testing.group_layout(places)
    native.pop("describe")
    assert layout.group_layout(places) == native


def test_interleaved_ranks_and_one_process_on_two_hosts():
    places = [("a", 0), ("b", 1), ("a", 0), ("b", 1)]
    assert layout.group_layout(places) == {
        k: v for k, v in _accl_testing.group_layout(places).items() if k != "describe"
    }
    with pytest.raises(ValueError, match="placed on hosts"):
        layout.group_layout([("a", 0), ("b", 0)])
    with pytest.raises(ValueError, match="placed on hosts"):
        _accl_testing.group_layout([("a", 0), ("b", 0)])
