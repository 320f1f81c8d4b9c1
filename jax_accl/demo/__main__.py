"""``python -m jax_accl.demo``: see jax_accl/demo/training.py."""

import sys

from jax_accl.demo.training import main

sys.exit(main())
