"""Predicted all-reduce time at cluster scale (`python -m jax_accl.plan`), e.g.

    python benchmarks/plan.py --hosts 1024 --devices-per-host 8 --rails 8 --link-gbps 200 \
        --size 256MiB

Every option is documented by --help.
"""

import sys

from jax_accl.plan.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
