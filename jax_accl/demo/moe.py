"""Demo: a mixture-of-experts layer trained with expert parallelism, its token exchanges
done by jax_accl's all-to-alls.

    python -m jax_accl.demo.moe                   # 8 CPU devices in this process
    python -m jax_accl.demo.moe --processes 2     # 2 processes x 4 devices
    python -m jax_accl.demo.moe --steps 5 --quiet # CI's short run

One expert per device (an MLP, its weights sharded over the "expert" axis), the router
replicated (in_specs=P(): its gradient all-reduce is the one autodiff inserts). Each
device's tokens go to their top-1 expert and come back weighted by the router's
probability, two ways:

* dense: each device packs at most `capacity` tokens per expert into a (experts,
  capacity, features) buffer (tokens past it are dropped), jax.lax.all_to_all to the
  experts and back;
* ragged: the tokens sorted by expert, jax.lax.ragged_all_to_all of exactly the rows each
  expert gets (the counts exchanged first by an all_to_all), and back: no padding and no
  drop. XLA:CPU does not run ragged_all_to_all at all.

The step is written with jax.lax and run under jax_accl.shard_map (every collective of
it, the gradient all-reduce included, jax_accl's: the demo checks the compiled step) and,
for the dense variant, under jax.shard_map (XLA's collectives; gloo across processes).
Both are checked against a single-device reference of the same model (jax.vmap over a
named axis; the ragged variant against the dense one with room for every token), and
the demo prints the loss per step and the step times.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

FEATURES, HIDDEN, TOKENS = 32, 64, 256  # tokens per device
AXIS = "expert"


def init(n: int, seed: int = 0):
    """(params, tokens, targets): the router (FEATURES, n) and n experts' weights; the
    tokens and a nonlinear target of them, for n devices."""
    rng = np.random.default_rng(seed)
    params = {
        "router": rng.standard_normal((FEATURES, n)).astype(np.float32) * 0.5,
        "w_in": rng.standard_normal((n, FEATURES, HIDDEN)).astype(np.float32) / FEATURES**0.5,
        "w_out": rng.standard_normal((n, HIDDEN, FEATURES)).astype(np.float32) / HIDDEN**0.5,
    }
    x = rng.standard_normal((n * TOKENS, FEATURES)).astype(np.float32)
    mix = rng.standard_normal((FEATURES, FEATURES)).astype(np.float32) / FEATURES**0.5
    return params, x, np.tanh(x @ mix) + 0.1 * np.sin(3 * x)


def expert(params, rows):
    """This device's expert on `rows` (its weights: the leading 1 of the shard)."""
    import jax.numpy as jnp

    return jnp.maximum(rows @ params["w_in"][0], 0.0) @ params["w_out"][0]


def route(params, x):
    """Each token's expert and the router's probability of it."""
    import jax
    import jax.numpy as jnp

    probs = jax.nn.softmax(x @ params["router"], axis=-1)
    chosen = jnp.argmax(probs, axis=-1)
    return chosen, jnp.take_along_axis(probs, chosen[:, None], axis=1)[:, 0]


def dense_layer(params, x, n: int, capacity: int):
    """Top-1 dispatch with `capacity` tokens per expert from this device, all_to_all to
    the experts, the expert, all_to_all back, combined."""
    import jax
    import jax.numpy as jnp

    chosen, weight = route(params, x)
    one_hot = jax.nn.one_hot(chosen, n, dtype=jnp.int32)  # (T, n)
    slot = jnp.sum((jnp.cumsum(one_hot, axis=0) - 1) * one_hot, axis=1)  # place in its expert
    kept = (slot < capacity).astype(x.dtype)
    mask = one_hot.astype(x.dtype)[:, :, None] * jax.nn.one_hot(slot, capacity)[:, None, :]
    mask = mask * kept[:, None, None]  # (T, n, capacity)
    packed = jnp.einsum("tec,tf->ecf", mask, x)
    arrived = jax.lax.all_to_all(packed, AXIS, 0, 0, tiled=True)  # (sources, capacity, F)
    done = expert(params, arrived.reshape(-1, FEATURES)).reshape(arrived.shape)
    back = jax.lax.all_to_all(done, AXIS, 0, 0, tiled=True)  # (experts, capacity, F)
    return jnp.einsum("tec,ecf->tf", mask, back) * weight[:, None]


def ragged_layer(params, x, n: int):
    """The tokens sorted by expert, ragged_all_to_all of exactly each expert's rows (the
    counts and offsets exchanged by all_to_all), the expert, ragged_all_to_all back."""
    import jax
    import jax.numpy as jnp

    chosen, weight = route(params, x)
    order = jnp.argsort(chosen, stable=True)
    counts = jnp.bincount(chosen, length=n).astype(jnp.int32)  # to each expert
    starts = jnp.cumsum(counts) - counts  # each expert's rows in the sorted tokens
    arriving = jax.lax.all_to_all(counts, AXIS, 0, 0, tiled=True)  # from each source
    placed_at = jnp.cumsum(arriving) - arriving  # where each source's rows land here
    lands_at = jax.lax.all_to_all(placed_at, AXIS, 0, 0, tiled=True)  # at each expert
    rows = jnp.zeros((n * TOKENS, FEATURES), x.dtype)
    received = jax.lax.ragged_all_to_all(
        x[order], rows, starts, counts, lands_at, arriving, axis_name=AXIS
    )
    done = expert(params, received)
    returns_to = jax.lax.all_to_all(starts, AXIS, 0, 0, tiled=True)  # in each source
    back = jax.lax.ragged_all_to_all(
        done, jnp.zeros_like(x), placed_at, arriving, returns_to, counts, axis_name=AXIS
    )
    return jnp.zeros_like(x).at[order].set(back) * weight[:, None]


def capacity(n: int) -> int:
    """Tokens a device sends each expert at most (dense): 1.25 times the mean share."""
    return 5 * TOKENS // (4 * n)


def local_loss(params, x, y, n: int, variant: str, cap: int):
    """This device's mean squared error of the residual layer's output."""
    import jax.numpy as jnp

    layer = ragged_layer(params, x, n) if variant == "ragged" else dense_layer(params, x, n, cap)
    d = x + layer - y
    return jnp.mean(d * d)


def sharded_step(mesh, variant: str, shard_map, lr: float):
    """One SGD step under `shard_map` (jax.shard_map or jax_accl.shard_map): the loss
    averaged over every device (pmean), value_and_grad, the update."""
    import jax
    from jax.sharding import PartitionSpec as P

    n = mesh.size
    specs = {"router": P(), "w_in": P(AXIS), "w_out": P(AXIS)}

    def body(params, x, y):
        def loss(p):
            return jax.lax.pmean(local_loss(p, x, y, n, variant, capacity(n)), AXIS)

        value, grads = jax.value_and_grad(loss)(params)
        return jax.tree.map(lambda w, g: w - lr * g, params, grads), value

    step = shard_map(body, mesh=mesh, in_specs=(specs, P(AXIS), P(AXIS)), out_specs=(specs, P()))
    return jax.jit(step, donate_argnums=0)


def reference_losses(params, x, y, n: int, steps: int, lr: float, cap: int) -> list:
    """The same training on one device: every expert's device a jax.vmap instance of a
    named axis (jax.lax's all_to_all batched), the same SGD."""
    import jax

    def loss(p):
        def one(router, w_in, w_out, xs, ys):
            q = {"router": router, "w_in": w_in[None], "w_out": w_out[None]}
            return local_loss(q, xs, ys, n, "dense", cap)

        per_device = jax.vmap(one, in_axes=(None, 0, 0, 0, 0), axis_name=AXIS)(
            p["router"], p["w_in"], p["w_out"], x.reshape(n, TOKENS, -1), y.reshape(n, TOKENS, -1)
        )
        return per_device.mean()

    step = jax.jit(jax.value_and_grad(loss))
    losses = []
    for _ in range(steps):
        value, grads = step(params)
        params = jax.tree.map(lambda w, g: w - lr * g, params, grads)
        losses.append(float(value))
    return losses


def train(mesh, variant: str, shard_map, params, x, y, steps: int, lr: float):
    """(losses, median step seconds, the compiled step's text)."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    def put(a, spec):
        return jax.make_array_from_callback(a.shape, NamedSharding(mesh, spec), lambda i: a[i])

    state = {k: put(v, P() if k == "router" else P(AXIS)) for k, v in params.items()}
    xs, ys = put(x, P(AXIS)), put(y, P(AXIS))
    step = sharded_step(mesh, variant, shard_map, lr)
    text = step.lower(state, xs, ys).compile().as_text()
    losses, times = [], []
    for _ in range(steps):
        start = time.perf_counter()
        state, value = step(state, xs, ys)
        losses.append(float(value))  # (waits for the step)
        times.append(time.perf_counter() - start)
    return losses, float(np.median(times[1:] if len(times) > 1 else times)), text


XLA_COLLECTIVES = ("all-to-all(", "all-reduce(", "all-gather(", "reduce-scatter(")


def run(mesh, steps: int, lr: float = 0.5) -> dict:
    import jax

    import jax_accl

    n = mesh.size
    params, x, y = init(n)
    out = {"devices": n, "steps": steps}
    for variant in ("dense", "ragged"):
        losses, seconds, text = train(mesh, variant, jax_accl.shard_map, params, x, y, steps, lr)
        left = [c for c in XLA_COLLECTIVES if c in text]
        if left:
            raise AssertionError(f"moe {variant}: XLA collectives left in the step: {left}")
        out[variant] = {"losses": losses, "step_s": seconds, "accl_calls": text.count("accl_")}
    lax_losses, lax_seconds, _ = train(mesh, "dense", jax.shard_map, params, x, y, steps, lr)
    out["lax_dense"] = {"losses": lax_losses, "step_s": lax_seconds}
    out["reference_dense"] = reference_losses(params, x, y, n, steps, lr, capacity(n))
    out["reference_no_drop"] = reference_losses(params, x, y, n, steps, lr, TOKENS)
    return out


def check(result: dict) -> None:
    """Each run equals its single-device reference to float tolerance, and learns."""
    pairs = (
        ("dense", "reference_dense"),
        ("ragged", "reference_no_drop"),
    )
    for ours, ref in pairs:
        got = np.asarray(result[ours]["losses"])
        np.testing.assert_allclose(got, result[ref], rtol=2e-4, err_msg=f"moe {ours}")
    lax = np.asarray(result["lax_dense"]["losses"])
    np.testing.assert_allclose(lax, result["reference_dense"], rtol=2e-4, err_msg="moe jax.lax")
    if result["steps"] >= 10 and not result["dense"]["losses"][-1] < result["dense"]["losses"][0]:
        raise AssertionError("moe: the dense variant's loss did not fall")


def report(result: dict) -> None:
    n = result["devices"]
    print(
        f"# mixture of experts: {n} experts, one per device, {TOKENS} tokens per device, "
        f"capacity {capacity(n)} per (device, expert) for the dense variant"
    )
    print(f"{'step':>4} {'dense':>10} {'ragged':>10} {'reference':>10}")
    for i, (d, r, ref) in enumerate(
        zip(result["dense"]["losses"], result["ragged"]["losses"], result["reference_dense"])
    ):
        print(f"{i:>4} {d:>10.5f} {r:>10.5f} {ref:>10.5f}")
    dense, ragged, lax = (result[k]["step_s"] for k in ("dense", "ragged", "lax_dense"))
    print(
        f"step time: dense {dense * 1e3:.2f} ms on jax_accl, {lax * 1e3:.2f} ms on jax.lax "
        f"({lax / dense:.2f}x); ragged (no padding, no drop) {ragged * 1e3:.2f} ms on jax_accl "
        "(jax.lax: XLA:CPU has no ragged all-to-all)"
    )
    print("results equal the single-device reference (dense: same capacity; ragged: none)")


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m jax_accl.demo.moe", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--devices", type=int, default=0, help="per process (default 8 / processes)"
    )
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--process-id", type=int, default=-1, help=argparse.SUPPRESS)
    parser.add_argument("--num-processes", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--coordinator", default="", help=argparse.SUPPRESS)
    parser.add_argument("--gloo-interface", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.devices = args.devices or max(1, 8 // args.processes)
    return args


def worker_main(args) -> dict:
    import jax

    from jax_accl.testing import launch

    devices = launch.worker_devices(args)
    mesh = jax.sharding.Mesh(np.array(devices), (AXIS,))
    result = run(mesh, args.steps)
    check(result)
    if args.num_processes > 1:
        print("RESULT " + json.dumps(result), flush=True)
        jax.distributed.shutdown()
    return result


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.processes > 1 and args.process_id < 0:
        from jax_accl.testing import launch

        extra = ["--steps", str(args.steps), "--quiet"]
        results = launch.run_job(
            ["-m", "jax_accl.demo.moe"], args.processes, args.devices, extra=extra, timeout=900
        )
        result = results[0]
    else:
        result = worker_main(args)
    if args.process_id <= 0 and not (args.quiet and args.steps < 10):
        report(result)
    elif args.process_id <= 0:
        print(f"moe: {args.steps} steps, dense and ragged equal the reference", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
