"""Plan and predict jax_accl's all-reduce on any cluster without the hardware.

``python -m jax_accl.plan --hosts 2 --processes-per-host 2 --devices-per-process 1
--rails 2 --link-gbps 0.3 --size 4MiB`` prints the runtime's own plan for that layout
(the native layout and plan, jax_accl.plan.runtime: tiers, the algorithm between hosts,
protocol, chunks) and its predicted time from the runtime's cost model. What Python adds
is what the runtime has no part in: the fabric between the hosts (whether any link
carries two flows in one step, and how much slower that makes the step between hosts),
from explicit schedules that a simulator checks. Everything here is pure.
"""

from jax_accl.plan.cost import ALGORITHMS, busbw, plan_for, predict_seconds
from jax_accl.plan.runtime import (
    Plan,
    format_layout,
    group_layout,
    parse_layout,
    places_of,
    regular_layout,
    runtime_plan,
)
from jax_accl.plan.schedule import Schedule, Transfer, flat, hierarchical, network_steps
from jax_accl.plan.simulate import check_symbolic, contention, run_numeric, run_symbolic
from jax_accl.plan.topology import FABRICS, Topology, path

__all__ = [
    "ALGORITHMS",
    "FABRICS",
    "Plan",
    "Schedule",
    "Topology",
    "Transfer",
    "busbw",
    "check_symbolic",
    "contention",
    "flat",
    "format_layout",
    "group_layout",
    "hierarchical",
    "network_steps",
    "parse_layout",
    "path",
    "places_of",
    "plan_for",
    "predict_seconds",
    "regular_layout",
    "run_numeric",
    "run_symbolic",
    "runtime_plan",
]
