"""The README's training step run as most loops run it (issue 47): 200 steps dispatched
without blocking, the loss read every 50, on this process's CPU devices (or as one
process of a job). Prints "RESULT <json>": whether the loop ran to its end, the steps it
dispatched, its time, and the error it stopped with (its last characters).

    python -m jax_accl.testing.async_loop --single --devices 8
    python -m jax_accl.testing.async_loop --process-id 0 --num-processes 2 ... --devices 4

``--xla-pool`` sizes XLA:CPU's thread pool as XLA does (PJRT_NPROC = max(cores,
devices)) instead of jax_accl's two threads per device: there the loop stalls in XLA:CPU,
and jax_accl's call must say so within seconds (xla_ffi/runtime/stall.h)."""

from __future__ import annotations

import argparse
import json
import os
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--single", action="store_true", help="one process")
    parser.add_argument("--process-id", type=int)
    parser.add_argument("--num-processes", type=int)
    parser.add_argument("--coordinator")
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--every", type=int, default=50, help="read the loss every N steps")
    parser.add_argument("--batch", type=int, default=256, help="examples per device")
    parser.add_argument("--variant", default="jax_accl", choices=("jax_accl", "jax.lax"))
    parser.add_argument("--xla-pool", action="store_true", help="XLA's pool size, not ours")
    args = parser.parse_args()
    if args.xla_pool:
        os.environ["PJRT_NPROC"] = str(max(os.cpu_count() or 1, args.devices))
    import jax

    jax.config.update("jax_num_cpu_devices", args.devices)
    if not args.single:
        jax.distributed.initialize(
            coordinator_address=args.coordinator,
            num_processes=args.num_processes,
            process_id=args.process_id,
            initialization_timeout=60,
        )
    import optax

    import jax_accl  # noqa: F401  (before JAX's CPU client is made: its pool's size)
    from jax_accl.demo import training

    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    optimizer = optax.adam(1e-3)
    params, opt_state = training.initial_state(mesh, optimizer, "dp")
    step_fn = training.build_step(mesh, optimizer, args.variant)
    n = jax.device_count()
    x_all, y_all = training.make_dataset(args.steps * args.batch * n, seed=1)
    started = last_read = time.monotonic()
    result = {"completed": False, "steps": 0, "losses": [], "error": ""}
    try:
        for i in range(args.steps):
            rows = slice(i * args.batch * n, (i + 1) * args.batch * n)
            x, y = training.global_batch(mesh, x_all[rows], y_all[rows])
            params, opt_state, loss = step_fn(params, opt_state, x, y)
            result["steps"] = i + 1
            if i % args.every == args.every - 1:
                result["losses"].append(float(loss))
                last_read = time.monotonic()
        jax.block_until_ready((params, opt_state))
        result["completed"] = True
    except Exception as e:  # the loop's one error, reported
        result["error"] = str(e)[-3000:]
    result["seconds"] = round(time.monotonic() - started, 1)
    # From the last result read (the loop's last sign of progress) to its end or error:
    # at most `every` steps' compute, then the wait that failed.
    result["since_last_read"] = round(time.monotonic() - last_read, 1)
    print("RESULT " + json.dumps(result), flush=True)
    try:  # the launches queued behind a failed one fail at once
        jax.block_until_ready((params, opt_state))
    except Exception:
        pass
    if not args.single:  # the coordinator (process 0) goes last
        jax.distributed.shutdown()
    os._exit(0)


if __name__ == "__main__":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    main()
