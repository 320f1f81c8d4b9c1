# Written into each worker (on PYTHONPATH): at exit, jax_accl's XLA-collective counters.
import atexit
import json
import os
import sys


def _dump():
    out = os.environ.get("JAX_SUITE_STATS_DIR")
    mod = sys.modules.get("jax_accl")
    if not out or mod is None:
        return
    try:
        stats = mod.stats()["xla_collectives"]
        calls = {k: v["calls"] for k, v in stats.items() if v["calls"]}
    except Exception as e:  # noqa: BLE001
        calls = {"error": str(e)}
    with open(os.path.join(out, f"stats-{os.getpid()}.json"), "w") as f:
        json.dump(calls, f)


atexit.register(_dump)
