"""A worker of a multi-process job that runs plain ``jax.jit`` programs on an Explicit
(or Auto) mesh, one CPU device per process and no shard_map: the collectives are the
ones XLA's SPMD partitioner inserts. With ``JAX_ACCL_XLA_COLLECTIVES=1`` in its
environment they run on jax_accl (jax_accl/xla_collectives.py), otherwise over gloo;
the tests run both and compare.

    python -m jax_accl.testing.jit_worker --program NAME ... (launch.run_job's arguments)

Prints ``RESULT <json>``: per program its outputs (this process's shards, as lists),
the collectives its compiled HLO holds by kind, and the jax_accl calls its second run
made by MPI function (``jax_accl.stats()["xla_collectives"]``; the first run makes the
communicators)."""

from __future__ import annotations

# isort: off
# jax_accl before jax: with JAX_ACCL_XLA_COLLECTIVES=1 it points jaxlib's MPItrampoline
# at its library (a no-op otherwise).
import jax_accl

import argparse
import json
import os
import signal
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from jax_accl.compiled import compiled_collectives
from jax_accl.testing import launch

# isort: on

parser = argparse.ArgumentParser()
parser.add_argument("--process-id", type=int, required=True)
parser.add_argument("--num-processes", type=int, required=True)
parser.add_argument("--coordinator", required=True)
parser.add_argument("--devices", type=int, default=1)
parser.add_argument("--program", action="append", required=True)
parser.add_argument("--axis-type", default="explicit", choices=["explicit", "auto"])
parser.add_argument("--steps", type=int, default=3)
parser.add_argument(
    "--profile-dir", default="", help="profile one more run of the last program here"
)
parser.add_argument("--gloo-interface", default="", help="gloo's interface (namespaced hosts)")
parser.add_argument(
    "--die",
    type=int,
    default=-1,
    help="this process is SIGKILLed after the first run; the others' second run must raise",
)
parser.add_argument(
    "--die-mid-call",
    type=float,
    default=0.0,
    help="with --die: every process runs the program over and over after its first run, "
    "and the dying one is SIGKILLed this many seconds into that loop (by a timer thread, "
    "so inside a call: the runs are back to back), not between runs",
)
parser.add_argument(
    "--kill-note", default="", help="with --die-mid-call: the dying process's kill time goes here"
)
parser.add_argument(
    "--inject-fault",
    action="append",
    default=[],
    choices=["allocation", "thread_start"],
    help="after the first run, for each: arm this fault in jax_accl's MPI library "
    "(jax_accl._accl_testing.arm_fault) for one call and run (which must raise), "
    "then run again (which must not)",
)


def hlo_collectives(compiled_text: str) -> dict:
    """{kind: {"ops", "buffers"}} of XLA's collectives in a compiled module."""
    return compiled_collectives(compiled_text)["xla"]


def mesh(n: int, axis_type: str):
    kind = AxisType.Explicit if axis_type == "explicit" else AxisType.Auto
    return jax.make_mesh((n,), ("x",), axis_types=(kind,))


def put(x, m, spec):
    return jax.make_array_from_callback(x.shape, NamedSharding(m, spec), lambda i: x[i])


def respec(a, m, spec):
    """`a` laid out as `spec`: jax.sharding.reshard on an Explicit mesh, a sharding
    constraint on an Auto one (XLA inserts the collective either way)."""
    if m.axis_types[0] == AxisType.Explicit:
        return jax.sharding.reshard(a, spec)
    return jax.lax.with_sharding_constraint(a, NamedSharding(m, spec))


def local(a):
    return [np.asarray(s.data).tolist() for s in a.addressable_shards]


def mlp_params(seed, width=64):
    rng = np.random.default_rng(seed)
    return {
        "w1": rng.standard_normal((16, width)).astype(np.float32) * 0.3,
        "w2": rng.standard_normal((width, 4)).astype(np.float32) * 0.3,
    }


def loss_fn(params, x, y, gather=lambda w: w):
    h = jnp.tanh(x @ gather(params["w1"]))
    return jnp.mean((h @ gather(params["w2"]) - y) ** 2)


def batch(n, seed=1):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((8 * n, 16)).astype(np.float32),
        rng.standard_normal((8 * n, 4)).astype(np.float32),
    )


def train(step, params, x, y, steps, shown):
    """`steps` steps from `params`: the losses and the parameters named in `shown`."""
    losses = []
    for _ in range(steps):
        params, loss = step(params, x, y)
        losses.append(float(loss))
    return {"losses": losses, **{name: local(params[name]) for name in shown}}


def data_parallel(m, n, steps):
    """Replicated parameters, the batch sharded: XLA all-reduces the gradients."""
    params = {k: put(v, m, P()) for k, v in mlp_params(0).items()}
    x, y = batch(n)
    x, y = put(x, m, P("x")), put(y, m, P("x"))

    @jax.jit
    def step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), loss

    def run():
        return train(step, params, x, y, steps, ("w1",))

    return step.lower(params, x, y), run, steps


def fsdp(m, n, steps):
    """Parameters sharded on their first axis and gathered for use (all-gather); their
    gradients come back sharded (reduce-scatter or all-reduce, as XLA chooses)."""
    params = {k: put(v, m, P("x")) for k, v in mlp_params(0).items()}
    x, y = batch(n)
    x, y = put(x, m, P("x")), put(y, m, P("x"))

    def gather(w):
        return respec(w, m, P())

    @jax.jit
    def step(params, x, y):
        loss, grads = jax.value_and_grad(lambda p: loss_fn(p, x, y, gather))(params)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), loss

    def run():
        return train(step, params, x, y, steps, ("w1", "w2"))

    return step.lower(params, x, y), run, steps


def gather_reshard(m, n, steps):
    """A sharded array made replicated: an all-gather."""
    x = put(np.arange(6 * n * 5, dtype=np.float32).reshape(6 * n, 5), m, P("x"))
    f = jax.jit(lambda a: respec(a * 2, m, P()))
    return f.lower(x), lambda: {"out": local(f(x))}, 1


def transpose_reshard(m, n, steps):
    """Rows sharded to columns sharded: an all-to-all."""
    x = put(np.arange(4 * n * 4 * n, dtype=np.int32).reshape(4 * n, 4 * n), m, P("x", None))
    f = jax.jit(lambda a: respec(a + 1, m, P(None, "x")))
    return f.lower(x), lambda: {"out": local(f(x))}, 1


def roll(m, n, steps):
    """jnp.roll along the sharded axis: a collective-permute."""
    x = put(np.arange(4 * n * 3, dtype=np.float32).reshape(4 * n, 3), m, P("x"))

    def rolled(a):
        return jnp.roll(a, 4, axis=0)

    if m.axis_types[0] == AxisType.Explicit:  # (jax >= 0.12 refuses to roll a sharded axis)
        rolled = jax.sharding.auto_axes(rolled, out_sharding=P("x"))
    f = jax.jit(rolled)
    return f.lower(x), lambda: {"out": local(f(x))}, 1


def integer_sums(m, n, steps):
    """Integer reductions of every width over the sharded axis (bitwise), max and min."""
    rng = np.random.default_rng(7)
    outs = {}
    lowered = []
    for dtype in (np.int8, np.int32, np.int64, np.uint32):
        x = put(rng.integers(0, 100, (8 * n, 33)).astype(dtype), m, P("x"))
        f = jax.jit(lambda a: (jnp.sum(a, axis=0, dtype=a.dtype), jnp.max(a, 0), jnp.min(a, 0)))
        lowered.append(f.lower(x))
        outs[np.dtype(dtype).name] = (f, x)

    def run():
        return {name: [local(o) for o in f(x)] for name, (f, x) in outs.items()}

    return lowered, run, 1


def partial_permute(m, n, steps):
    """Permutations some ranks take no part in (XLA's collective-permute then makes no
    MPI call on them), around an all-reduce on the same devices: 0 <-> 1, then 0 -> n-1
    (pairs: 3 messages in all per run)."""
    x = put(np.arange(2 * n * 3, dtype=np.int32).reshape(2 * n, 3), m, P("x"))

    def body(a):
        swapped = jax.lax.ppermute(a, "x", [(0, 1), (1, 0)])
        moved = jax.lax.ppermute(swapped + 1, "x", [(0, n - 1)])
        return jax.lax.psum(moved, "x"), moved

    f = jax.jit(jax.shard_map(body, mesh=m, in_specs=P("x"), out_specs=(P(), P("x"))))
    return f.lower(x), lambda: {"out": [local(o) for o in f(x)]}, 1


def large_sum(m, n, steps):
    """A 4 MiB float32 sum over the sharded axis: large enough to stripe over rails."""
    x = put(np.random.default_rng(5).standard_normal((n, 1 << 20)).astype(np.float32), m, P("x"))
    f = jax.jit(lambda a: jnp.sum(a, axis=0))
    return f.lower(x), lambda: {"out": local(f(x))}, 1


def shard_map_collectives(m, n, steps):
    """jax.lax's own psum_scatter, all_gather, ppermute and all_to_all in a shard_map:
    XLA's reduce-scatter, all-gather, collective-permute and all-to-all ops."""
    rng = np.random.default_rng(3)
    x = put(rng.integers(-50, 50, (4 * n * n, 6)).astype(np.int32), m, P("x"))
    perm = [(i, (i + 1) % n) for i in range(n)]

    def body(a):
        scattered = jax.lax.psum_scatter(a, "x", tiled=True)
        gathered = jax.lax.all_gather(a * 3, "x", tiled=True)
        shifted = jax.lax.ppermute(a - 1, "x", perm)
        exchanged = jax.lax.all_to_all(a + 5, "x", 0, 0, tiled=True)
        return scattered, gathered, shifted, exchanged

    f = jax.jit(
        jax.shard_map(body, mesh=m, in_specs=P("x"), out_specs=(P("x"), P("x"), P("x"), P("x")))
    )
    return f.lower(x), lambda: {"out": [local(o) for o in f(x)]}, 1


PROGRAMS = {
    "data_parallel": data_parallel,
    "fsdp": fsdp,
    "gather_reshard": gather_reshard,
    "transpose_reshard": transpose_reshard,
    "roll": roll,
    "integer_sums": integer_sums,
    "shard_map_collectives": shard_map_collectives,
    "large_sum": large_sum,
    "partial_permute": partial_permute,
}


def run_until_killed(run, dying: bool, after_s: float, note: str) -> dict:
    """Runs `run` back to back. The dying process is SIGKILLed `after_s` into the loop
    by a timer thread (its wall time, time.time(), written to `note` first), while its
    main thread is in a run; the others run until a call fails, and report the error,
    its wall time, how long the failing run took and the runs done before it; then the
    error of one more run and how long that took."""
    if dying:

        def kill():
            if note:
                with open(note, "w") as f:
                    f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)

        threading.Timer(after_s, kill).start()
    runs = 0
    while True:
        began = time.monotonic()
        try:
            run()
        except Exception as e:  # XLA's runtime error, carrying jax_accl's message
            failed = {
                "error": f"{type(e).__name__}: {e}",
                "error_at": time.time(),
                "failing_run_s": time.monotonic() - began,
                "runs": runs,
            }
            break
        runs += 1
    began = time.monotonic()
    try:
        run()
        failed["later_error"] = ""
    except Exception as e:
        failed["later_error"] = f"{type(e).__name__}: {e}"
    failed["later_run_s"] = time.monotonic() - began
    return failed


def run_with_faults(run, kinds) -> dict:
    """For each fault kind: a run with it armed for the next MPI call of this process
    (its error: type, module and message) and a run after it (its outputs, or error)."""
    from jax_accl import _accl_testing

    out = {}
    for kind in kinds:
        _accl_testing.arm_fault(kind, 1)
        try:
            run()
            failed = None
        except Exception as e:  # XLA's runtime error, carrying jax_accl's message
            failed = {"type": type(e).__name__, "module": type(e).__module__, "message": str(e)}
        finally:
            _accl_testing.arm_fault("none", 0)
        try:
            after = {"outputs": run()}
        except Exception as e:
            after = {"error": f"{type(e).__name__}: {e}"}
        out[kind] = {"failed": failed, "after": after}
    return out


def main(argv=None):
    args = parser.parse_args(argv)
    launch.join_job(
        args.devices,
        args.coordinator,
        args.num_processes,
        args.process_id,
        args.gloo_interface,
        initialization_timeout=60,
    )
    n = jax.device_count()
    m = mesh(n, args.axis_type)
    result = {"enabled": jax_accl.xla_collectives.enabled(), "programs": {}}
    with jax.set_mesh(m):
        for name in args.program:
            lowered, run, executions = PROGRAMS[name](m, n, args.steps)
            lowered = lowered if isinstance(lowered, list) else [lowered]
            hlo = {}
            for low in lowered:
                for kind, count in hlo_collectives(low.compile().as_text()).items():
                    mine = hlo.setdefault(kind, {"ops": 0, "buffers": 0})
                    mine["ops"] += count["ops"]
                    mine["buffers"] += count["buffers"]
            first = run()  # the first run makes XLA's communicators (MPI_Comm_split)
            if args.inject_fault:
                result["first"] = first
                result["faults"] = run_with_faults(run, args.inject_fault)
                break
            if args.die >= 0 and args.die_mid_call > 0:
                dying = args.die == args.process_id
                result.update(run_until_killed(run, dying, args.die_mid_call, args.kill_note))
                break
            if args.die == args.process_id:
                os.kill(os.getpid(), signal.SIGKILL)
            jax_accl.reset_stats()
            try:
                outputs = run()
            except Exception as e:  # XLA's runtime error, carrying jax_accl's message
                if args.die < 0:
                    raise
                result["error"] = f"{type(e).__name__}: {e}"
                break
            calls = {
                k: v["calls"] for k, v in jax_accl.stats()["xla_collectives"].items() if v["calls"]
            }
            result["programs"][name] = {
                "hlo": hlo,
                "executions": executions,
                "calls": calls,
                "outputs": outputs,
                "transports": {
                    k: v["bytes_sent"] for k, v in jax_accl.stats()["transports"].items()
                },
            }
    if args.profile_dir and "error" not in result:
        log_dir = os.path.join(args.profile_dir, f"process{args.process_id}")
        with jax.set_mesh(m), jax_accl.profiler.trace(log_dir) as traced:
            run()
        result["profile"] = [
            {"name": e["name"], "call": e.get("call", "")}
            for e in jax_accl.profiler.native_events(traced.xplane)
        ]
    print("RESULT " + json.dumps(result), flush=True)
    if args.die >= 0:
        os._exit(0)  # a peer is gone: jax.distributed's shutdown barrier would wait for it


if __name__ == "__main__":
    main()
