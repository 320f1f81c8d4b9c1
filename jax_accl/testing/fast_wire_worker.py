"""One process of a job on unshaped namespaced hosts (a fast wire), for the paths large
calls take there: windowed reducing receives, halving-doubling between two hosts,
chunked pipelines beside a processes tier. Scenarios (--scenario):

* exact: int32 all-reduces of each --sizes per device, bitwise against NumPy;
* kill: the last process is SIGKILLed in the middle of a 256 MiB all-reduce; every
  survivor raises, naming the failure, within seconds;
* late: the last process reaches a 256 MiB all-reduce 25 s late (a checkpoint); the
  call waits for it (deadline 60 s) and is exact.

Prints "RESULT <json>" (jax_accl.testing.launch.run_job reads it).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax_accl
from jax_accl.testing import worker as w
from jax_accl.units import parse_size


def _row(index: int, count: int, seed: int) -> np.ndarray:
    """Device `index`'s input: small integers, the same in every process that asks."""
    rng = np.random.default_rng([seed, index])
    return rng.integers(-1000, 1000, (1, count), dtype=np.int32)


def _checked_call(per_device_bytes: int, seed: int):
    """The placed input and a function running the all-reduce, checked bitwise. Each
    process makes only its own devices' rows and sums the rest one at a time (a 256 MiB
    row per device: the whole input at once would be 1 GiB per process at 2 x 2)."""
    rows, count = w.NP * w.ND, per_device_bytes // 4
    sharding = NamedSharding(w.MESH_2D, P(w.ALL))
    placed = jax.make_array_from_callback(
        (rows, count), sharding, lambda index: _row(index[0].start, count, seed)
    )
    want = np.zeros(count, np.int32)
    for index in range(rows):
        want += _row(index, count, seed)[0]
    program = w.allreduce_program(jax_accl, w.ALL)

    def run(name: str) -> None:
        for block in w.local_blocks(program(placed)):
            if not np.array_equal(block.reshape(-1), want):
                raise AssertionError(f"{name}: the result differs from NumPy's")

    return run


def scenario_exact(sizes: list[int]) -> dict:
    checked = []
    for k, size in enumerate(sizes):
        run = _checked_call(size, seed=k)
        for rep in range(2):
            run(f"{size} bytes per device, call {rep}")
        checked.append(size)
    from jax_accl import _accl

    return {
        "checked": checked,
        "stats": jax_accl.stats()["algorithms"],
        "spin_us": _accl.link_spin_us(),
        "congestion": _accl.tcp_congestion(),
    }


def scenario_kill() -> dict:
    run = _checked_call(256 << 20, seed=5)
    run("warm-up")
    if jax.process_index() == w.NP - 1:  # dies 50 ms into the next call
        threading.Timer(0.05, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    start = time.perf_counter()
    try:
        run("the call a peer dies in")
    except Exception as e:  # jax's runtime error, carrying jax_accl's message
        return {"error": str(e), "seconds_to_error": time.perf_counter() - start}
    return {"error": None, "seconds": time.perf_counter() - start}


def scenario_late() -> dict:
    run = _checked_call(256 << 20, seed=7)
    run("warm-up")
    if jax.process_index() == w.NP - 1:
        time.sleep(25.0)
    start = time.perf_counter()
    run("after the late peer")
    waited = time.perf_counter() - start
    run("next")
    return {"waited_s": waited}


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--scenario", choices=["exact", "kill", "late"], required=True)
    parser.add_argument("--sizes", default="64MiB,256MiB")
    known, rest = parser.parse_known_args()
    w.join([*rest, "--scenario", known.scenario, "--reference", "numpy"])
    if known.scenario == "exact":
        result = scenario_exact([parse_size(s) for s in known.sizes.split(",")])
    elif known.scenario == "kill":
        result = scenario_kill()
        print("RESULT " + json.dumps(result), flush=True)
        os._exit(0)  # a peer is gone: jax.distributed's shutdown barrier would wait for it
    else:
        result = scenario_late()
    jax.distributed.shutdown()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
