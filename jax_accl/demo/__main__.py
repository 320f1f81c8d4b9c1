"""``python -m jax_accl.demo``: the shard_map demo (jax_accl/demo/training.py), or with
--jit the plain-jit one (jax_accl/demo/jit_training.py)."""

import contextlib
import sys

from jax_accl.demo import jit_training, training
from jax_accl.testing import launch

args = training.parse_args(sys.argv[1:])
training.require_optax()
# The launcher (not a worker it started) ends its workers on any signal that ends it.
with launch.ended_by_signals() if args.process_id < 0 else contextlib.nullcontext():
    sys.exit(jit_training.main(args) if args.jit else training.main(args))
