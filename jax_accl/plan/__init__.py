"""Plan and predict jax_accl's all-reduce at cluster scale without the hardware.

``python -m jax_accl.plan --hosts 1024 --devices-per-host 8 --rails 8 --link-gbps 200
--size 256MiB`` prints the schedule, the flows per rail, whether any link carries two
flows in one step on the chosen fabric, and the predicted time and busbw of every
algorithm from the runtime's cost-model constants. Everything here is pure.
"""

from jax_accl.plan.cost import ALGORITHMS, Constants, busbw, predict_seconds
from jax_accl.plan.schedule import Schedule, Transfer, flat, hierarchical, network_steps
from jax_accl.plan.simulate import check_symbolic, contention, run_numeric, run_symbolic
from jax_accl.plan.topology import FABRICS, Topology, path

__all__ = [
    "ALGORITHMS",
    "FABRICS",
    "Constants",
    "Schedule",
    "Topology",
    "Transfer",
    "busbw",
    "check_symbolic",
    "contention",
    "flat",
    "hierarchical",
    "network_steps",
    "path",
    "predict_seconds",
    "run_numeric",
    "run_symbolic",
]
