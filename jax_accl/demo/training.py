"""Demo: data-parallel training with optax, the gradient all-reduce done by jax_accl.

    python -m jax_accl.demo                  # 8 CPU devices in this process
    python -m jax_accl.demo --processes 2    # 2 processes x 4 devices, via jax.distributed
    python -m jax_accl.demo --hosts 2 --processes-per-host 2 --devices 2
                                             # on namespaced hosts, two shaped rails (root)
    python -m jax_accl.demo --strategy fsdp  # parameters and adam state sharded (or: tp, pp)
    python -m jax_accl.demo --jit --processes 2
                                             # plain jax.jit, XLA's own collectives on
                                             # jax_accl (jax_accl/demo/jit_training.py)

An MLP learns to classify points drawn from a mixture of Gaussians (generated here, no
download). The step is the data-parallel step JAX's shard_map documentation teaches:
replicated parameters (in_specs=P()), the loss averaged over the global batch with
jax.lax.pmean, jax.value_and_grad, optax. Its gradient all-reduce is the one autodiff
inserts (the transpose of the implicit pvary of every replicated parameter). The same
step function runs twice: under jax.shard_map, where XLA all-reduces, and under
jax_accl.shard_map, where every all-reduce is jax_accl's and the gradients and the loss
travel in fused gradient buckets (jax_accl/fusion.py). The demo prints what each
compiled step contains (XLA all-reduces, jax_accl calls), the loss per step, the final
accuracy, the largest parameter difference between the two runs, and their step times.
``--strategy fsdp``, ``tp`` and ``pp`` train the same model with its parameters and
optimizer state sharded (jax_accl/demo/strategies.py): all-gathers and reduce-scatters,
or a pipeline's ppermutes, written with jax.lax, carried by jax_accl under
jax_accl.shard_map.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from jax_accl.bench.load import busy_note
from jax_accl.demo import strategies

CLASSES, FEATURES, HIDDEN = 8, 32, (512, 512, 256)


def make_dataset(samples: int, seed: int):
    """Points of CLASSES Gaussian clusters, each cluster a curved ribbon (not linearly
    separable), with labels; the same for every process."""
    rng = np.random.default_rng(seed)
    centers = np.random.default_rng(1234).standard_normal((CLASSES, FEATURES)) * 0.45
    labels = rng.integers(0, CLASSES, samples)
    t = rng.standard_normal(samples)[:, None]
    bend = np.sin(3 * t) * np.roll(centers[labels], 1, axis=1) * 0.5
    x = centers[labels] + t * 0.8 + bend + rng.standard_normal((samples, FEATURES)) * 1.0
    return x.astype(np.float32), labels.astype(np.int32)


def init_params(seed: int):
    import jax
    import jax.numpy as jnp

    sizes = (FEATURES, *HIDDEN, CLASSES)
    keys = jax.random.split(jax.random.key(seed), len(sizes) - 1)
    return [
        {
            "w": jax.random.normal(k, (m, n), jnp.float32) * jnp.sqrt(2.0 / m),
            "b": jnp.zeros((n,), jnp.float32),
        }
        for k, m, n in zip(keys, sizes[:-1], sizes[1:])
    ]


def forward(params, x):
    import jax

    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def logits_loss(logits, y):
    import optax

    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def loss_fn(params, x, y):
    return logits_loss(forward(params, x), y)


def build_step(mesh, optimizer, variant: str, donate: bool = True, strategy: str = "dp"):
    """One jitted training step; `variant` picks whose collectives run it: the same
    step function under jax.shard_map ("jax.lax") or jax_accl.shard_map ("jax_accl")."""
    import jax
    import optax
    from jax.sharding import PartitionSpec as P

    import jax_accl

    global_loss = strategies.global_loss(strategy, loss_fn, logits_loss, CLASSES)

    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(global_loss)(params, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    shard_map = {"jax.lax": jax.shard_map, "jax_accl": jax_accl.shard_map}[variant]
    if strategy == "dp":  # params and adam state replicated: P() covers each pytree
        param_spec, opt_spec = P(), P()
    else:
        param_spec = strategies.param_specs(strategy, len(HIDDEN) + 1)
        opt_spec = strategies.opt_state_specs(param_spec)
    data = strategies.batch_spec(strategy)
    return jax.jit(
        shard_map(
            step,
            mesh=mesh,
            in_specs=(param_spec, opt_spec, data, data),
            out_specs=(param_spec, opt_spec, P()),
        ),
        donate_argnums=(0, 1) if donate else (),
    )


def initial_state(mesh, optimizer, strategy: str):
    """The initial parameters and adam state, laid out as `strategy` keeps them."""
    params = init_params(0)
    if strategy == "dp":
        return params, optimizer.init(params)
    param_spec = strategies.param_specs(strategy, len(params))
    if strategy == "pp":
        params = strategies.stacked_layers(params)
    return (
        strategies.place(mesh, params, param_spec),
        strategies.place(mesh, optimizer.init(params), strategies.opt_state_specs(param_spec)),
    )


def compiled_collectives(step_fn, *args) -> dict:
    """What the compiled step holds: XLA's collectives and jax_accl's custom calls."""
    from jax_accl.compiled import collectives

    found = collectives(step_fn, *args)
    out = {f"xla {kind}": found["xla"].get(kind, {}).get("ops", 0) for kind in KINDS_SHOWN}
    out["jax_accl calls"] = sum(found["jax_accl"].values())
    return out


KINDS_SHOWN = ("all-reduce", "reduce-scatter", "all-gather", "collective-permute")


def global_batch(mesh, x, y, strategy: str = "dp"):
    import jax
    from jax.sharding import NamedSharding

    data = NamedSharding(mesh, strategies.batch_spec(strategy))
    return (
        jax.make_array_from_callback(x.shape, data, lambda idx: x[idx]),
        jax.make_array_from_callback(y.shape, data, lambda idx: y[idx]),
    )


def progress(step: int, total: int, loss: float, width: int = 30) -> str:
    done = int(width * step / total)
    return f"step {step:4d}/{total} [{'#' * done}{'.' * (width - done)}] loss {loss:.4f}"


def train(mesh, variant: str, steps: int, batch_per_device: int, show: bool, strategy="dp"):
    """Trains from the same initial parameters and batches; returns losses, params, step
    times and the compiled step's collectives."""
    import jax
    import optax

    n = mesh.devices.size
    optimizer = optax.adam(1e-3)
    params, opt_state = initial_state(mesh, optimizer, strategy)
    step_fn = build_step(mesh, optimizer, variant, strategy=strategy)
    x_all, y_all = make_dataset(steps * batch_per_device * n, seed=1)
    losses, times, collectives = [], [], None
    for i in range(steps):
        rows = slice(i * batch_per_device * n, (i + 1) * batch_per_device * n)
        x, y = global_batch(mesh, x_all[rows], y_all[rows], strategy)
        if collectives is None:
            collectives = compiled_collectives(step_fn, params, opt_state, x, y)
        start = time.perf_counter()
        params, opt_state, loss = step_fn(params, opt_state, x, y)
        loss = float(loss)
        times.append(time.perf_counter() - start)
        losses.append(loss)
        if show and sys.stdout.isatty():  # one bar, redrawn every step
            print(
                "\r" + progress(i + 1, steps, loss), end="\n" if i == steps - 1 else "", flush=True
            )
        elif show and (i % max(1, steps // 10) == 0 or i == steps - 1):
            print(progress(i + 1, steps, loss), flush=True)
    # The loss came back, but the parameters' all-reduces may still run (they overlap
    # the step): done before the caller reads jax_accl.stats().
    params, opt_state = jax.block_until_ready((params, opt_state))
    return losses, params, times, collectives


def accuracy(params) -> float:
    import jax

    x, y = make_dataset(4096, seed=99)
    predictions = np.asarray(jax.jit(forward)(params, x)).argmax(-1)
    return float((predictions == y).mean())


# Why the runs' parameters differ at all (printed beside the difference).
DIFFERENCE_NOTE = (
    "float32 rounding: jax_accl and XLA add the devices' gradients in different orders, "
    "which changes the last bits of a sum, and {steps} steps of training amplify that; "
    "the losses and accuracies are what agree"
)


def max_param_difference(a, b) -> float:
    """The largest difference between two parameter pytrees (global arrays: this
    process's shards are compared; each process reports on its own)."""
    import jax

    def local(leaf):
        shards = getattr(leaf, "addressable_shards", None)
        if shards is None:
            return [np.asarray(leaf)]
        return [np.asarray(s.data) for s in sorted(shards, key=lambda s: s.device.id)]

    return max(
        float(np.max(np.abs(p - q)))
        for pa, qa in zip(jax.tree.leaves(a), jax.tree.leaves(b))
        for p, q in zip(local(pa), local(qa))
    )


def run(mesh, steps: int, batch_per_device: int, quiet: bool, strategy: str = "dp") -> dict:
    import jax

    import jax_accl

    show = not quiet and jax.process_index() == 0
    say = print if show else (lambda *a, **k: None)
    n_params = sum(int(np.prod(p.shape)) for p in jax.tree.leaves(init_params(0)))
    say(
        f"MLP {FEATURES}-{'-'.join(map(str, HIDDEN))}-{CLASSES}, {n_params:,} parameters "
        f"({n_params * 4 / 2**20:.2f} MiB of gradients per step), {mesh.devices.size} devices "
        f"in {jax.process_count()} process(es), batch {batch_per_device} per device, "
        f"strategy {strategy} (mesh {dict(mesh.shape)})"
    )
    say("training under jax_accl.shard_map (every collective jax_accl's):")
    jax_accl.reset_stats()
    losses, params, accl_times, accl_hlo = train(
        mesh, "jax_accl", steps, batch_per_device, show, strategy
    )
    calls = jax_accl.stats()["algorithms"]
    calls_per_step = sum(v["calls"] for v in calls.values()) / steps
    say("the same step under jax.shard_map (XLA's collectives):")
    ref_losses, ref_params, lax_times, lax_hlo = train(
        mesh, "jax.lax", steps, batch_per_device, show, strategy
    )
    result = {
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "losses": losses,
        "reference_last_loss": ref_losses[-1],
        "strategy": strategy,
        "accuracy": accuracy(layers(params, strategy)),
        "reference_accuracy": accuracy(layers(ref_params, strategy)),
        "max_param_difference": max_param_difference(params, ref_params),
        "accl_calls_per_step_per_device": calls_per_step
        / (mesh.devices.size // jax.process_count()),
        "compiled_step": {"jax_accl": accl_hlo, "jax.lax": lax_hlo},
        "step_seconds": {
            "jax.lax": float(np.median(lax_times[1:] or lax_times)),
            "jax_accl": float(np.median(accl_times[1:] or accl_times)),
        },
    }
    say(
        f"\nfinal loss {result['last_loss']:.4f} (jax.lax: {result['reference_last_loss']:.4f}), "
        f"accuracy {result['accuracy']:.1%} (jax.lax: {result['reference_accuracy']:.1%})"
    )
    say(
        f"largest parameter difference from the jax.lax run: {result['max_param_difference']:.3g}"
        f" ({DIFFERENCE_NOTE.format(steps=steps)})"
    )
    say(f"jax_accl calls per step and device: {result['accl_calls_per_step_per_device']:.0f}")
    say(
        "\ncompiled step      XLA all-reduce  reduce-scatter  all-gather  collective-permute"
        "  jax_accl calls"
    )
    for name, hlo in result["compiled_step"].items():
        say(
            f"  {name:<16} {hlo['xla all-reduce']:>14} {hlo['xla reduce-scatter']:>15} "
            f"{hlo['xla all-gather']:>11} {hlo['xla collective-permute']:>19} "
            f"{hlo['jax_accl calls']:>15}"
        )
    say("\nstep time (median)   ms   vs jax.lax")
    base = result["step_seconds"]["jax.lax"]
    for name, t in result["step_seconds"].items():
        say(f"  {name:<16} {t * 1e3:6.2f}   {base / t:5.2f}x")
    if busy_note():
        say(busy_note())
    return result


def layers(params, strategy: str) -> list:
    """The model's layers as whole numpy arrays on every process, whatever the layout."""
    whole = gathered(params)
    if strategy == "pp":
        return strategies.unstacked_layers(whole, (FEATURES, *HIDDEN, CLASSES))
    return whole


def gathered(params):
    """Sharded parameters as whole numpy arrays on every process (for evaluation)."""
    import jax
    from jax.experimental import multihost_utils

    def whole(leaf):
        if getattr(leaf, "is_fully_addressable", True):
            return np.asarray(leaf)
        return np.asarray(multihost_utils.process_allgather(leaf, tiled=True))

    return jax.tree.map(whole, params)


def breakdown(mesh, batch_per_device: int, reps: int) -> dict:
    """Step, compute alone and communication alone, as jax_accl.demo.breakdown times them."""
    import optax

    from jax_accl.demo import breakdown as timing

    optimizer = optax.adam(1e-3)
    params = init_params(0)
    n = mesh.devices.size
    x, y = global_batch(mesh, *make_dataset(batch_per_device * n, seed=2))
    return timing.measure(
        mesh, build_step, loss_fn, optimizer, params, optimizer.init(params), x, y, reps
    )


def worker_main(args) -> int:
    import jax

    from jax_accl.testing import launch

    devices = launch.worker_devices(args)
    mesh = strategies.mesh_for(devices, args.strategy)
    result = run(mesh, args.steps, args.batch, args.quiet, args.strategy)
    if args.breakdown:
        from jax_accl.demo.breakdown import report

        result["breakdown_seconds"] = breakdown(mesh, args.batch, args.breakdown)
        if jax.process_index() == 0 and not args.quiet:
            print(f"\nwhere a step's time goes (median of {args.breakdown} steps, after barriers):")
            print("\n".join(report(result["breakdown_seconds"])), flush=True)
    if args.json or args.num_processes > 1:
        print("RESULT " + json.dumps(result), flush=True)
    if args.num_processes > 1:
        jax.distributed.shutdown()
    return 0


def run_on_namespaced_hosts(args, extra) -> int:
    """The job on --hosts network-namespace hosts with --rails shaped rails each (root)."""
    from jax_accl.testing import launch, netns

    rails = ",".join(f"rail{r}" for r in range(args.rails))
    with netns.virtual_hosts(
        args.hosts, args.rails, rate_mbit=args.rate_mbit or None, mtu=args.mtu
    ) as names:
        spaces = [name for name in names for _ in range(args.processes_per_host)]
        print(
            f"{args.hosts} namespaced hosts x {args.processes_per_host} processes x "
            f"{args.devices} devices, {args.rails} rails at {args.rate_mbit:g} Mbit/s each "
            f"(MTU {args.mtu}); jax.lax runs over gloo on rail0",
            flush=True,
        )
        wire = netns.stated_wire(args.rate_mbit, args.mtu)
        launch.run_on_namespaced_hosts(
            ["-m", "jax_accl.demo"],
            spaces,
            args.devices,
            rails,
            extra=extra,
            env=[wire] * len(spaces),
            timeout=1800,
            echo=0,
        )
    return 0


def require_optax() -> None:
    """The demo trains with optax, which only its `demo` extra brings: without it, one
    line saying how to install it, where every worker would raise an ImportError."""
    try:
        import optax  # noqa: F401
    except ImportError as e:
        raise SystemExit(
            f"python -m jax_accl.demo trains with optax, which cannot be imported ({e}): "
            'install the demo extra, `pip install ".[demo]"` from a checkout (or `pip '
            "install optax`)"
        ) from None


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m jax_accl.demo", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=64, help="examples per device per step")
    parser.add_argument(
        "--devices", type=int, default=0, help="devices per process (default: 8 / processes)"
    )
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument(
        "--hosts",
        type=int,
        default=1,
        help="on this many namespaced hosts (root; sets --processes)",
    )
    parser.add_argument("--processes-per-host", type=int, default=1)
    parser.add_argument(
        "--strategy",
        choices=strategies.STRATEGIES,
        default="dp",
        help="dp: data parallel; fsdp: parameters and adam state sharded (ZeRO-3); "
        "tp: tensor parallel on a (data, model) mesh; pp: a 4-stage pipeline (GPipe) on a "
        "(data, stage) mesh",
    )
    parser.add_argument("--rails", type=int, default=2, help="rails per namespaced host")
    parser.add_argument("--rate-mbit", type=float, default=300.0, help="tc rate of each rail")
    parser.add_argument("--mtu", type=int, default=1500, help="MTU of each rail")
    parser.add_argument(
        "--breakdown",
        type=int,
        default=0,
        help="after training, time this many steps, their compute alone and their "
        "communication alone (on by default with --hosts: 20)",
    )
    parser.add_argument(
        "--jit",
        action="store_true",
        help="the same model as a plain jax.jit program on an Explicit mesh (no shard_map, "
        "--devices per process, default 1), its XLA collectives on jax_accl against gloo "
        "(jax_accl/demo/jit_training.py)",
    )
    parser.add_argument(
        "--reps", type=int, default=20, help="--jit: timed runs of the all-reduce alone"
    )
    parser.add_argument(
        "--allreduce-mib",
        type=float,
        default=0,
        help="--jit: the all-reduce timed alone, MiB per device (default: the gradients' size)",
    )
    parser.add_argument("--gloo-interface", default="", help=argparse.SUPPRESS)
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--json", action="store_true", help="print a RESULT line (tests)")
    parser.add_argument("--process-id", type=int, default=-1, help=argparse.SUPPRESS)
    parser.add_argument("--num-processes", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--coordinator", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.jit:
        return args  # jit_training.main reads the layout itself
    if args.hosts > 1:
        args.processes = args.hosts * args.processes_per_host
        args.breakdown = args.breakdown or (20 if args.strategy == "dp" else 0)
    if args.breakdown and args.strategy != "dp":
        parser.error("--breakdown times the data-parallel step only (--strategy dp)")
    return args


def main(args) -> int:
    """`python -m jax_accl.demo` without --jit (demo/__main__.py), `args` parsed."""
    args.devices = args.devices or max(1, 8 // args.processes)
    if args.processes > 1 and args.process_id < 0:
        from jax_accl.testing import launch

        extra = ["--steps", str(args.steps), "--batch", str(args.batch)] + (
            ["--quiet"] if args.quiet else []
        )
        extra += ["--strategy", args.strategy]
        extra += ["--breakdown", str(args.breakdown)] if args.breakdown else []
        if args.hosts <= 1:
            launch.run_job(
                ["-m", "jax_accl.demo"], args.processes, args.devices, extra=extra, echo=0
            )
            return 0
        return run_on_namespaced_hosts(args, extra)
    return worker_main(args)


if __name__ == "__main__":
    sys.exit(main(parse_args(sys.argv[1:])))
