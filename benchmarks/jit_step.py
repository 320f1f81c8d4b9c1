"""A plain jax.jit training step (Explicit mesh, no shard_map, 1 CPU device per process)
with XLA's collectives on jax_accl against the same step over gloo: the demo's --jit
mode (jax_accl/demo/jit_training.py), runnable from a checkout:

    python benchmarks/jit_step.py --processes 2
    python benchmarks/jit_step.py --hosts 2 --processes-per-host 2 --steps 60   # root
    python benchmarks/jit_step.py --processes 2 --strategy fsdp

It prints both runs' losses, the compiled step's collectives, the MPI calls per step,
the step times and the gradients' all-reduce alone against the two-rail network limit.
"""

import sys

from jax_accl.demo.training import main

if __name__ == "__main__":
    sys.exit(main(["--jit", *sys.argv[1:]]))
