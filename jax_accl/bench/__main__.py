"""``python -m jax_accl.bench``: see jax_accl/bench/__init__.py."""

import sys

from jax_accl.bench.cli import main

sys.exit(main())
