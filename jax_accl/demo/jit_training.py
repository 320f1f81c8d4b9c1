"""The demo's model trained the way most JAX code is written: ``jax.jit`` on an Explicit
mesh, no shard_map, one CPU device per process or several (``--devices``). XLA's SPMD
partitioner inserts the collectives (the gradient all-reduce; with ``--strategy fsdp``
the parameters' all-gathers too). The job runs twice, with jax_accl as XLA:CPU's collectives backend
(JAX_ACCL_XLA_COLLECTIVES=1, jax_accl/xla_collectives.py) and over gloo, and the
launcher prints both side by side: losses, accuracy, the final parameters' largest
difference, what the compiled step holds, step times, and an all-reduce of a jit
program alone (the gradients' size, or ``--allreduce-mib`` per device) against the
network limit between hosts.

    python -m jax_accl.demo --jit --processes 2
    python -m jax_accl.demo --jit --hosts 2 --processes-per-host 2   # root: namespaced hosts
    python -m jax_accl.demo --jit --processes 2 --devices 4 --allreduce-mib 16
"""

from __future__ import annotations

import json
import time

import numpy as np

from jax_accl.bench.load import busy_note
from jax_accl.demo import training

# Every SAMPLE-th parameter, compared between the two runs.
SAMPLE = 97


def place(mesh, tree, spec_of):
    import jax
    from jax.sharding import NamedSharding

    def one(leaf):
        leaf = np.asarray(leaf)
        sharding = NamedSharding(mesh, spec_of(leaf))
        return jax.make_array_from_callback(leaf.shape, sharding, lambda idx: leaf[idx])

    return jax.tree.map(one, tree)


def build(mesh, optimizer, strategy: str):
    """The jitted step: replicated parameters (dp), or parameters sharded on their first
    axis and gathered where they are used (fsdp)."""
    import jax
    import optax
    from jax.sharding import PartitionSpec as P

    def loss(params, x, y):
        if strategy == "fsdp":
            params = jax.tree.map(lambda w: jax.sharding.reshard(w, P()), params)
        return training.loss_fn(params, x, y)

    def step(params, opt_state, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    return jax.jit(step, donate_argnums=(0, 1))


def compiled_collectives(text: str) -> dict:
    from jax_accl.compiled import compiled_collectives

    return {kind: c["ops"] for kind, c in compiled_collectives(text)["xla"].items()}


def median_seconds(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def worker(args) -> dict:
    """One process of the job (jax.distributed joined by the caller)."""
    import jax
    import jax.numpy as jnp
    import optax
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    import jax_accl

    n = jax.device_count()
    mesh = jax.make_mesh((n,), ("data",), axis_types=(AxisType.Explicit,))
    optimizer = optax.adam(1e-3)
    with jax.set_mesh(mesh):
        init = training.init_params(0)
        spec = (lambda leaf: P("data")) if args.strategy == "fsdp" else (lambda leaf: P())
        params = place(mesh, init, spec)
        opt_state = optimizer.init(params)
        step = build(mesh, optimizer, args.strategy)
        x_all, y_all = training.make_dataset(args.steps * args.batch * n, seed=1)
        batch = NamedSharding(mesh, P("data"))

        def data(i):
            rows = slice(i * args.batch * n, (i + 1) * args.batch * n)
            return [
                jax.make_array_from_callback(a[rows].shape, batch, lambda idx, a=a[rows]: a[idx])
                for a in (x_all, y_all)
            ]

        hlo = compiled_collectives(step.lower(params, opt_state, *data(0)).compile().as_text())
        losses, times = [], []
        jax_accl.reset_stats()
        for i in range(args.steps):
            x, y = data(i)
            start = time.perf_counter()
            params, opt_state, loss = step(params, opt_state, x, y)
            losses.append(float(loss))
            times.append(time.perf_counter() - start)
        calls = {
            k: v["calls"] / args.steps
            for k, v in jax_accl.stats()["xla_collectives"].items()
            if k != "MPI_Comm_split" and v["calls"]
        }
        whole = training.gathered(params)
        flat = np.concatenate([np.ravel(leaf) for leaf in jax.tree.leaves(whole)])
        # An all-reduce alone: one buffer per device of the parameters' size, or of
        # --allreduce-mib.
        elements = int(args.allreduce_mib * 2**20) // 4 if args.allreduce_mib else flat.size
        grads = place(mesh, np.ones((n, elements), np.float32), lambda leaf: P("data"))
        summed = jax.jit(lambda g: jnp.sum(g, axis=0))
        summed(grads).block_until_ready()
        allreduce_s = median_seconds(lambda: summed(grads).block_until_ready(), args.reps)
    return {
        "enabled": jax_accl.xla_collectives.enabled(),
        "losses": losses,
        "step_seconds": float(np.median(times[1:] or times)),
        "allreduce_seconds": allreduce_s,
        "allreduce_bytes": int(elements * 4),
        "accuracy": training.accuracy(whole),
        "sample": flat[::SAMPLE].tolist(),
        "compiled_step": hlo,
        "calls_per_step": calls,
    }


def worker_main(args) -> int:
    import jax

    from jax_accl.testing import launch

    launch.join_job(
        args.devices, args.coordinator, args.num_processes, args.process_id, args.gloo_interface
    )
    result = worker(args)
    print("RESULT " + json.dumps(result), flush=True)
    jax.distributed.shutdown()
    return 0


def network_limit_s(args, nbytes: int) -> float:
    """The all-reduce's bytes between hosts over every rail: twice a reduce-scatter's."""
    from jax_accl.plan.collectives import network_limit_s as limit

    if args.hosts < 2 or not args.rate_mbit:
        return 0.0
    return 2 * limit("reduce_scatter", args.hosts, args.rails, nbytes, 8 / (args.rate_mbit * 1e6))


def launch_both(args, extra: list[str]) -> dict:
    """The job on jax_accl and over gloo; process 0's result of each."""
    from jax_accl.testing import launch, netns

    worker_cmd = ["-m", "jax_accl.demo", "--jit", *extra]
    results = {}
    for name, switch in (("jax_accl", "1"), ("gloo", "0")):
        wire = netns.stated_wire(args.rate_mbit, args.mtu) if args.hosts > 1 else {}
        env = [{"JAX_ACCL_XLA_COLLECTIVES": switch, **wire}] * args.processes
        if args.hosts <= 1:
            results[name] = launch.run_job(
                worker_cmd, args.processes, args.devices, env=env, timeout=1800
            )[0]
            continue
        rails = ",".join(f"rail{r}" for r in range(args.rails))
        with netns.virtual_hosts(
            args.hosts, args.rails, rate_mbit=args.rate_mbit or None, mtu=args.mtu
        ) as names:
            spaces = [s for s in names for _ in range(args.processes_per_host)]
            results[name] = launch.run_on_namespaced_hosts(
                worker_cmd, spaces, args.devices, rails, env=env, timeout=1800
            )[0]
    return results


def report(args, results: dict) -> list[str]:
    ours, gloo = results["jax_accl"], results["gloo"]
    where = (
        f"{args.hosts} namespaced hosts x {args.processes_per_host} processes, {args.rails} "
        f"rails at {args.rate_mbit:g} Mbit/s"
        if args.hosts > 1
        else f"{args.processes} processes on this host"
    )
    mib = ours["allreduce_bytes"] / 2**20
    limit = network_limit_s(args, ours["allreduce_bytes"])
    difference = float(np.max(np.abs(np.subtract(ours["sample"], gloo["sample"]))))
    lines = [
        f"jax.jit, Explicit mesh, no shard_map, strategy {args.strategy}: {where}, "
        f"{args.devices} CPU device(s) each, batch {args.batch} per device, {args.steps} steps",
        f"final loss {ours['losses'][-1]:.4f} (gloo: {gloo['losses'][-1]:.4f}), accuracy "
        f"{ours['accuracy']:.1%} (gloo: {gloo['accuracy']:.1%}), largest parameter "
        f"difference (every {SAMPLE}th) {difference:.3g}",
        f"compiled step's collectives (the same program both times): {ours['compiled_step']}",
        "carried by jax_accl, MPI calls per step: "
        + ", ".join(f"{k} {v:g}" for k, v in sorted(ours["calls_per_step"].items())),
        "",
        "                         jax_accl      gloo   speedup",
        f"  step (median)      {ours['step_seconds'] * 1e3:9.2f} ms "
        f"{gloo['step_seconds'] * 1e3:7.2f} ms   "
        f"{gloo['step_seconds'] / ours['step_seconds']:5.2f}x",
        f"  all-reduce {mib:.2f} MiB {ours['allreduce_seconds'] * 1e3:7.2f} ms "
        f"{gloo['allreduce_seconds'] * 1e3:7.2f} ms   "
        f"{gloo['allreduce_seconds'] / ours['allreduce_seconds']:5.2f}x",
        "  (not like for like: the all-reduce row is one buffer per device, one call timed "
        "alone; the step reduces each gradient apart, smaller, among its compute: the two "
        "ratios need not agree)",
    ]
    if limit:
        lines.append(
            f"  network limit of that all-reduce over {args.rails} rails: {limit * 1e3:.2f} ms "
            f"(jax_accl {ours['allreduce_seconds'] / limit:.2f}x it, gloo "
            f"{gloo['allreduce_seconds'] / limit:.2f}x)"
        )
    if busy_note():
        lines.append(busy_note())
    return lines


def main(args) -> int:
    if args.process_id >= 0:
        return worker_main(args)
    if args.strategy not in ("dp", "fsdp"):
        raise SystemExit("jax_accl.demo --jit: --strategy dp or fsdp")
    if args.hosts > 1:
        args.processes = args.hosts * args.processes_per_host
    if args.processes < 2:
        raise SystemExit("jax_accl.demo --jit: XLA's collectives need --processes 2 or more")
    extra = ["--steps", str(args.steps), "--batch", str(args.batch), "--strategy", args.strategy]
    args.devices = args.devices or 1
    extra += ["--reps", str(args.reps), "--devices", str(args.devices)]
    extra += ["--allreduce-mib", str(args.allreduce_mib)]
    results = launch_both(args, extra)
    print("\n".join(report(args, results)), flush=True)
    if args.json:
        print("RESULT " + json.dumps(results), flush=True)
    return 0
