"""The start every worker script of these jobs makes with several CPU devices per process:
the arguments launch.run_job passes (coordinator, process count, this process's index),
the device count, and jax.distributed joined. Imported by the scripts beside it (a
script's own directory is first on sys.path), before anything of jax_accl."""

import argparse

import jax


def join(devices: int) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--coordinator", required=True)
    parser.add_argument("--num-processes", type=int, required=True)
    parser.add_argument("--process-id", type=int, required=True)
    args, _ = parser.parse_known_args()
    jax.config.update("jax_num_cpu_devices", devices)
    jax.distributed.initialize(args.coordinator, args.num_processes, args.process_id)
    return args


def xla_calls() -> dict:
    """The MPI calls jax_accl's library carried for XLA in this process so far, by name
    ({} where jax_accl is not installed). jax_accl's start-up hook has imported it
    already where it is XLA's backend; importing it here only reads its counters."""
    try:
        import jax_accl
    except ImportError:
        return {}
    stats = jax_accl.stats().get("xla_collectives", {})
    return {k: v["calls"] for k, v in stats.items() if v["calls"]}
