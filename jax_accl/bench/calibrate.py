"""`python -m jax_accl.bench --calibrate`: measures this machine's cost-model constants
(jax_accl/cost_model.py says what each is) and the one-host choice, and stores them.

In one process: alpha from a small reduce-broadcast, beta and gamma from large NumPy
kernels. Then, for every one-host shape P x k of the job's devices, a multi-process job
times each candidate of the automatic choice forced (calibration_points(), process 0
reporting), fits each a line (fit_line()) and the model's one-host constants
to them all (fit_one_host()), and prints measured against fitted.
"""

from __future__ import annotations

import time

import numpy as np

from jax_accl import _accl, cost_model
from jax_accl.bench import sweep, timing
from jax_accl.bench.progress import Progress, weight
from jax_accl.bench.timing import JOB_TIMEOUT_S
from jax_accl.testing import launch
from jax_accl.units import human

# What `bench --calibrate` times on every one-host shape: each candidate of the automatic
# choice (reduce_broadcast across processes is the cross-memory-attach one) at each size,
# largest first (the first few hundred all-reduces of a process run slower; at the large
# sizes that is lost in their warm-up); direct only up to 1 MiB, where it already takes
# 4x the others (10 ms per op at 8 ranks).
ONE_HOST_ALGORITHMS = ("direct", "ring", "halving_doubling", "reduce_broadcast")
ONE_HOST_SIZES = tuple(1 << e for e in range(22, 9, -2))  # 4 MiB .. 1 KiB
DIRECT_MAX_BYTES = 1 << 20


def _best_seconds(fn, reps: int = 5) -> float:
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def in_process(small_op_seconds: float) -> dict:
    """alpha, beta, gamma from a small reduce-broadcast's time per op and large kernels."""
    n = 64 << 20
    src, dst = np.ones(n // 8), np.empty(n // 8)
    beta = _best_seconds(lambda: np.copyto(dst, src)) / (2 * n)
    a, b = np.ones(n // 8), np.ones(n // 8)
    gamma = _best_seconds(lambda: np.add(a, b, out=dst)) / (3 * n)
    return {"alpha": small_op_seconds / 2, "beta": beta, "gamma": gamma}


def _predictions(points, values: dict) -> np.ndarray:
    """The model's seconds at every (processes, k, algorithm, bytes) with `values` set,
    then restored."""
    saved = _accl.get_cost_model()
    try:
        _accl.set_cost_model(**values)
        return np.array([_accl.predict_one_host(a, p, k, b) for p, k, a, b in points])
    finally:
        _accl.set_cost_model(**saved)


def predicted(points) -> np.ndarray:
    """The current model's seconds at every (processes, k, algorithm, bytes)."""
    return _predictions(points, {})


def fit_one_host(measured: list[tuple[int, int, str, int, float]]) -> dict:
    """The one-host constants that best predict `measured` [(processes, k, algorithm,
    bytes, seconds)] (direct, ring, halving_doubling, reduce_broadcast), by least squares
    on the relative error: the model is linear in them. A constant the points cannot
    tell (shm_alpha where every step crosses processes, cma_beta without cross-memory
    attach) or that fits below zero keeps its current value and is left out."""
    points = [m[:4] for m in measured]
    seconds = np.array([m[4] for m in measured])
    weights = 1.0 / seconds
    free = list(cost_model.ONE_HOST)
    while free:
        zero = {name: 0.0 for name in free}
        base = _predictions(points, zero)
        columns = (
            np.stack([_predictions(points, {**zero, name: 1.0}) - base for name in free], axis=1)
            * weights[:, None]
        )
        told = np.abs(columns).max(axis=0) > 1e-9
        if not told.all():
            free = [name for name, ok in zip(free, told) if ok]
            continue
        x, *_ = np.linalg.lstsq(columns, (seconds - base) * weights, rcond=None)
        if (x > 0).all():
            return dict(zip(free, x.tolist()))
        free.pop(int(np.argmin(x)))
    return {}


def fit_line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(latency, per_byte), both >= 0, of the line through [(bytes, seconds)] with the least
    relative error, robustly: iteratively reweighted (Huber), so that a point off by more
    than 10% of the line (the difference of two noisy timings) counts as if it were 10% off."""
    x = np.array([float(b) for b, _ in points])
    y = np.array([t for _, t in points])
    w = 1.0 / y
    for _ in range(10):
        (a, b), *_ = np.linalg.lstsq(np.stack([w, x * w], axis=1), y * w, rcond=None)
        if b < 0:
            a, b = float(np.sum(y * w * w) / np.sum(w * w)), 0.0
        elif a < 0:
            a, b = 0.0, float(np.sum(x * y * w * w) / np.sum(x * x * w * w))
        line = np.maximum(a + b * x, 1e-12)
        off = np.abs(y - line) / line
        w = np.minimum(1.0, 0.1 / np.maximum(off, 1e-12)) ** 0.5 / line
    return float(a), float(b)


def model_choice(processes: int, k: int, size: int, algorithms) -> str:
    """The model's pick among `algorithms` on processes x k (measured times aside)."""
    return min(algorithms, key=lambda a: _accl.predict_one_host(a, processes, k, size))


def main(args) -> int:
    """Measure the cost model's constants here, store them, show the choices they make:
    the in-process ones on the job's devices, then every one-host shape P x k of them
    (the one --processes names, or all with P >= 2 processes)."""
    import jax

    n = args.devices * max(1, args.processes)
    shapes = [args.processes] if args.processes > 1 else [p for p in range(2, n + 1) if n % p == 0]
    if not shapes:
        raise SystemExit("--calibrate needs at least 2 devices")
    jax.config.update("jax_num_cpu_devices", n)
    # The pieces: the in-process constants (large NumPy kernels), then each shape's sizes.
    progress = Progress(
        "jax_accl.bench --calibrate",
        [weight(64 << 20)]
        + [weight(size) * len(ONE_HOST_ALGORITHMS) for _ in shapes for size in ONE_HOST_SIZES],
    )
    progress.begin(f"{n} devices in one process")
    rows, _, _, _, _, _ = sweep.measure(
        4096,
        n,
        ["reduce_broadcast"],
        timing.chain_length(4096, 50, n),
        5,
        baseline=False,
        one_call=False,
    )
    values = in_process(dict(rows)["accl:reduce_broadcast"])
    print(
        f"# {n} devices in one process: "
        + ", ".join(f"{name}={v:.3g}" for name, v in values.items())
    )
    tables, measured = {}, []
    for processes in shapes:
        k = n // processes
        points = launch.run_job(
            ["-m", "jax_accl.bench"],
            processes,
            k,
            extra=["--calibrate", "--reps", str(args.reps)],
            timeout=JOB_TIMEOUT_S,
            on_progress=lambda piece, shape=f"{processes} processes x {k} devices": progress.begin(
                f"{shape}: {human(piece['size'])}"
            ),
        )[0]["points"]
        tables[f"{processes}x{k}"] = one_host_lines(points)
        measured += [
            (processes, k, p["ran"], p["bytes"], p["seconds"])
            for p in points
            if p["ran"] in ONE_HOST_ALGORITHMS
        ]
    progress.finish()
    fitted = fit_one_host(measured)
    path = cost_model.store({**values, **fitted, "one_host": tables})
    print(
        f"# one host, model fitted to {len(measured)} points: "
        + ", ".join(f"{name}={v:.3g}" for name, v in fitted.items())
        + "; kept: "
        + (", ".join(sorted(set(cost_model.ONE_HOST) - set(fitted))) or "none")
    )
    for shape, lines in tables.items():
        processes, k = (int(x) for x in shape.split("x"))
        print_one_host_lines(processes, k, lines)
    print(f"# stored in {path}")
    for size in (4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20):
        print(
            f"#   {human(size):>6}: {n} devices in one process -> {_accl.choose_algorithm(n, size)}"
        )
    return 0


def one_host_lines(points: list[dict]) -> dict:
    """{algorithm: {"latency", "per_byte", "measured": [[bytes, seconds], ...]}} from
    calibration_points(), each forced algorithm filed under what it ran (reduce_broadcast
    without cross-memory attach runs the hierarchy) and left out where that varied."""
    lines = {}
    for algorithm in dict.fromkeys(p["algorithm"] for p in points):
        mine = sorted((p for p in points if p["algorithm"] == algorithm), key=lambda p: p["bytes"])
        ran = {p["ran"] for p in mine}
        if len(ran) == 1:
            measured = [[p["bytes"], p["seconds"]] for p in mine]
            latency, per_byte = fit_line(measured)
            lines[ran.pop()] = {"latency": latency, "per_byte": per_byte, "measured": measured}
    return lines


def print_one_host_lines(processes: int, k: int, lines: dict) -> None:
    """Per size: each candidate's measured time (its line's), the choice and the model's."""
    algorithms = list(lines)
    print(f"# {processes}x{k} on this host, per op, measured (calibrated line):")
    print(
        "# "
        + f"{'size':>6} "
        + "".join(f"{a:>22}" for a in algorithms)
        + f"{'auto':>18}{'model alone':>18}"
    )
    cma = "reduce_broadcast" in algorithms
    for size in sorted({b for line in lines.values() for b, _ in line["measured"]}):
        cells = ""
        for a in algorithms:
            t = dict(lines[a]["measured"]).get(size)
            fit = lines[a]["latency"] + size * lines[a]["per_byte"]
            cells += (f"{t * 1e6:>11.0f}" if t else f"{'-':>11}") + f" ({fit * 1e6:>6.0f})us"
        auto = _accl.choose_one_host(processes, k, size, cma)
        print(
            f"# {human(size):>6} {cells}{auto:>18}"
            f"{model_choice(processes, k, size, algorithms):>18}"
        )


def calibration_points(n: int, reps: int, on_size=None) -> list[dict]:
    """One process of `bench --calibrate`'s multi-process run: every algorithm of
    ONE_HOST_ALGORITHMS forced over all n devices at every size of
    ONE_HOST_SIZES, with the algorithm it ran."""
    points = []
    for size in ONE_HOST_SIZES:
        if on_size:
            on_size(size)
        algorithms = [a for a in ONE_HOST_ALGORITHMS if a != "direct" or size <= DIRECT_MAX_BYTES]
        rows, _, _, ran, _, _ = sweep.measure(
            size,
            n,
            algorithms,
            timing.chain_length(size, 0, n),
            reps,
            baseline=False,
            one_call=False,
        )
        points += [
            {"algorithm": name[5:], "bytes": size, "seconds": t, "ran": ran[name]}
            for name, t in rows
        ]
    return points
