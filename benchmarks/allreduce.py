"""The all-reduce benchmark of the README, runnable from a checkout:

    python benchmarks/allreduce.py --sizes 4KiB,1MiB,16MiB,64MiB --plot busbw.png
    python benchmarks/allreduce.py --processes 2 --devices 4 --sizes 1MiB,16MiB
    python benchmarks/allreduce.py --processes 3 --hosts 3 --devices 2 --rails 2   # root

The sweep itself is jax_accl.bench (also `python -m jax_accl.bench`), so that an installed
package can run it too; every option is documented by --help.
"""

import sys

from jax_accl.bench import main

if __name__ == "__main__":
    sys.exit(main())
