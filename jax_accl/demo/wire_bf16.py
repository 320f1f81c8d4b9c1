"""``python -m jax_accl.demo.wire_bf16``: the demo's MLP (jax_accl/demo/training.py)
trained twice under jax_accl.shard_map from the same start and batches, its gradient
all-reduces travelling as float32, then as bfloat16 (``JAX_ACCL_WIRE_DTYPE=bfloat16``
while the step is traced): the final accuracies, the loss curves side by side (--plot,
a PNG), and after every step a check that every device holds the same parameter bits.

    python -m jax_accl.demo.wire_bf16 --steps 500 --plot docs/wire_bf16_loss.png
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from jax_accl import config
from jax_accl.demo import training


def replicas_differ(params) -> list[str]:
    """The parameter leaves whose devices hold different bits (none, replicas equal)."""
    import jax

    differing = []
    for k, leaf in enumerate(jax.tree.leaves(params)):
        shards = [np.asarray(s.data) for s in leaf.addressable_shards]
        if any(not np.array_equal(s.view(np.uint32), shards[0].view(np.uint32)) for s in shards):
            differing.append(f"leaf {k} {leaf.shape}")
    return differing


def train(mesh, wire: str, steps: int, batch_per_device: int) -> dict:
    import jax
    import optax

    optimizer = optax.adam(1e-3)
    params, opt_state = training.initial_state(mesh, optimizer, "dp")
    with config.knob_set("JAX_ACCL_WIRE_DTYPE", wire):
        step_fn = training.build_step(mesh, optimizer, "jax_accl")
        n = mesh.devices.size
        x_all, y_all = training.make_dataset(steps * batch_per_device * n, seed=1)
        losses = []
        for i in range(steps):
            rows = slice(i * batch_per_device * n, (i + 1) * batch_per_device * n)
            x, y = training.global_batch(mesh, x_all[rows], y_all[rows])
            params, opt_state, loss = step_fn(params, opt_state, x, y)
            losses.append(float(loss))
            differing = replicas_differ(params)
            if differing:
                raise AssertionError(
                    f"wire {wire or 'float32'}, step {i}: replicas differ in "
                    + ", ".join(differing)
                )
    params = jax.block_until_ready(params)
    return {"losses": losses, "accuracy": training.accuracy(params)}


def plot(path: str, runs: dict, steps: int, devices: int) -> None:
    """Left: both loss curves; right: the bfloat16 run's loss minus float32's, per step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (curves, gap) = plt.subplots(1, 2, figsize=(11, 4))
    x = range(1, steps + 1)
    for (name, run), style in zip(runs.items(), ("-", "--")):
        label = f"{name} (accuracy {run['accuracy']:.1%})"
        curves.plot(x, run["losses"], style, label=label, linewidth=1)
    curves.set(xlabel="step", ylabel="training loss", yscale="log")
    curves.set_title(f"demo MLP, {devices} devices, {steps} steps")
    curves.legend()
    f32, bf16 = (np.asarray(run["losses"]) for run in runs.values())
    gap.plot(x, bf16 - f32, linewidth=0.8, color="tab:red")
    gap.axhline(0, color="black", linewidth=0.5)
    gap.set(xlabel="step", ylabel="loss difference")
    gap.set_title("bfloat16 wire minus float32 wire")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m jax_accl.demo.wire_bf16")
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--batch-per-device", type=int, default=32)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--plot", default="")
    parser.add_argument("--json", default="")
    return parser.parse_args(argv)


def main(argv) -> int:
    args = parse_args(argv)
    training.require_optax()
    import jax

    jax.config.update("jax_num_cpu_devices", args.devices)
    mesh = jax.make_mesh((args.devices,), ("data",))
    runs = {
        "float32 wire": train(mesh, "", args.steps, args.batch_per_device),
        "bfloat16 wire": train(mesh, "bfloat16", args.steps, args.batch_per_device),
    }
    f32, bf16 = runs["float32 wire"], runs["bfloat16 wire"]
    result = {
        "steps": args.steps,
        "devices": args.devices,
        "accuracy": {k: v["accuracy"] for k, v in runs.items()},
        "last_loss": {k: v["losses"][-1] for k, v in runs.items()},
        "accuracy_difference": bf16["accuracy"] - f32["accuracy"],
        "replicas_bitwise_equal_every_step": True,
    }
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**result, "losses": {k: v["losses"] for k, v in runs.items()}}, f)
    if args.plot:
        plot(args.plot, runs, args.steps, args.devices)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
