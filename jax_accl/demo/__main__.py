"""``python -m jax_accl.demo``: the shard_map demo (jax_accl/demo/training.py), or with
--jit the plain-jit one (jax_accl/demo/jit_training.py)."""

import sys

from jax_accl.demo import jit_training, training

args = training.parse_args(sys.argv[1:])
sys.exit(jit_training.main(args) if args.jit else training.main(args))
