"""One process of a job that starts jax_accl's side (distributed.ensure_started) and
nothing else, as the first collective of a multi-process program would.

    python start_up.py --coordinator H:P --num-processes N --process-id I

Prints ``STARTED`` or ``FAILED <unix time> <error>``; a failure raises on (the exit
code and the shutdown are the user's)."""

import argparse
import time

import jax

from jax_accl import distributed
from jax_accl.testing import launch

parser = argparse.ArgumentParser()
parser.add_argument("--coordinator", required=True)
parser.add_argument("--num-processes", type=int, required=True)
parser.add_argument("--process-id", type=int, required=True)
args = parser.parse_args()
launch.join_job(1, args.coordinator, args.num_processes, args.process_id)
try:
    distributed.ensure_started()
except Exception as e:
    print(f"FAILED {time.time():.3f} {e}", flush=True)
    raise
print("STARTED", flush=True)
jax.distributed.shutdown()
