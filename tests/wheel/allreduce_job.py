"""The wheel's check (scripts/test_wheel.sh runs it in a fresh virtual environment holding
only the wheel and its dependencies): a job of 2 processes x 2 CPU devices on this
machine, through jax.distributed on localhost; each all-reduces through jax_accl.psum
under jax.shard_map, checks the sums, and that jax_accl (not XLA) carried the all-reduce.

    python allreduce_job.py            # the launcher: starts the two processes, waits
    python allreduce_job.py WORKER ... # one process (what the launcher starts)

Only jax, numpy and jax_accl: nothing of the checkout, of jax_accl's tooling, or of a
compiler. Prints "wheel check: ..." and exits 0 when both processes agree."""

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time

PROCESSES, DEVICES, COUNT = 2, 2, 1000
TIMEOUT_S = 300


def worker(process_id: int, coordinator: str) -> None:
    import jax
    import jaxlib
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    jax.config.update("jax_num_cpu_devices", DEVICES)
    jax.distributed.initialize(coordinator, num_processes=PROCESSES, process_id=process_id)
    import jax_accl

    # The wheel's package, not a checkout's; the library without the tests' harness.
    assert jax_accl.__file__.startswith(sys.prefix), (jax_accl.__file__, sys.prefix)
    assert importlib.util.find_spec("jax_accl._accl_testing") is None
    mesh = jax.make_mesh((PROCESSES * DEVICES,), ("data",))
    # Row d of the global array (device d's shard) holds d + 1: the sum is 1 + 2 + 3 + 4.
    x = jax.make_array_from_callback(
        (PROCESSES * DEVICES, COUNT),
        NamedSharding(mesh, P("data")),
        lambda index: np.full((1, COUNT), index[0].start + 1, np.float32),
    )
    step = jax.jit(
        jax.shard_map(
            lambda shard: jax_accl.psum(shard, "data"),
            mesh=mesh,
            in_specs=P("data"),
            out_specs=P(),
        )
    )
    result = jax.block_until_ready(step(x))  # every device's call, not only shard 0's
    total = np.asarray(result.addressable_shards[0].data)
    expected = sum(range(1, PROCESSES * DEVICES + 1))
    assert total.shape == (1, COUNT) and np.all(total == expected), (total, expected)
    held = jax_accl.collectives(step, x)
    assert held["xla"] == {} and held["jax_accl"] == {"accl_allreduce": 1}, held
    # One call per device of this process; a call is counted as it ends, which may be
    # just after its result is ready.
    deadline = time.monotonic() + 5
    while (calls := jax_accl.stats()["collectives"]["all-reduce"]["calls"]) < DEVICES:
        assert time.monotonic() < deadline, f"{calls} all-reduce calls counted, not {DEVICES}"
        time.sleep(0.01)
    assert calls == DEVICES, calls
    # The wheel is built for the baseline x86-64; its AVX2 kernels are picked at run time.
    isa = jax_accl.stats()["reduce_isa"]
    assert isa == ("avx2" if cpu_has_avx2() else "generic"), (isa, cpu_has_avx2())
    print(
        "RESULT",
        json.dumps(
            {
                "process": process_id,
                "sum": float(total[0, 0]),
                "jax": jax.__version__,
                "jaxlib": jaxlib.__version__,
                "module": jax_accl.__file__,
                "reduce_isa": isa,
            }
        ),
        flush=True,
    )
    jax.distributed.shutdown()


def cpu_has_avx2() -> bool:
    """Whether this CPU has what the AVX2 kernels use (AVX2, FMA, F16C), as Linux reports it."""
    with open("/proc/cpuinfo") as cpuinfo:
        flags = next((line.split() for line in cpuinfo if line.startswith("flags")), [])
    return {"avx2", "fma", "f16c"} <= set(flags)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launch() -> None:
    coordinator = f"127.0.0.1:{free_port()}"
    processes = [
        subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "WORKER", str(p), coordinator],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for p in range(PROCESSES)
    ]
    results, failed = [], []
    for p, process in enumerate(processes):
        try:
            output, _ = process.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            for other in processes:
                other.kill()
            output, _ = process.communicate()
            failed.append(f"process {p} still running after {TIMEOUT_S} s:\n{output}")
            continue
        lines = [line for line in output.splitlines() if line.startswith("RESULT ")]
        if process.returncode != 0 or len(lines) != 1:
            failed.append(f"process {p} exited {process.returncode}:\n{output}")
        else:
            results.append(json.loads(lines[0][len("RESULT ") :]))
    if failed:
        raise SystemExit("wheel check failed:\n" + "\n".join(failed))
    first = results[0]
    print(
        f"wheel check: {PROCESSES} processes x {DEVICES} devices, jax_accl.psum of "
        f"{COUNT} floats = {first['sum']} on every device; jax {first['jax']}, "
        f"jaxlib {first['jaxlib']}, reduce kernels {first['reduce_isa']}, "
        f"jax_accl from {os.path.dirname(first['module'])}"
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["WORKER"]:
        worker(int(sys.argv[2]), sys.argv[3])
    else:
        launch()
