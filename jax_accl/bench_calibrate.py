"""`python -m jax_accl.bench --calibrate`: measures this machine's cost-model constants
(calibrate.py) and the one-host choice, and stores them.

In one process: alpha from a small reduce-broadcast, beta and gamma from large NumPy
kernels. Then, for every one-host shape P x k of the job's devices, a multi-process job
times each candidate of the automatic choice forced (calibration_points(), process 0
reporting), fits each a line (calibrate.fit_line()) and the model's one-host constants
to them all (calibrate.fit_one_host()), and prints measured against fitted.
"""
from __future__ import annotations

from jax_accl import bench, calibrate


def main(args) -> int:
    """Measure the cost model's constants here, store them, show the choices they make:
    the in-process ones on the job's devices, then every one-host shape P x k of them
    (the one --processes names, or all with P >= 2 processes)."""
    import jax

    from jax_accl import _accl, launch
    n = args.devices * max(1, args.processes)
    shapes = ([args.processes] if args.processes > 1 else
              [p for p in range(2, n + 1) if n % p == 0])
    if not shapes:
        raise SystemExit("--calibrate needs at least 2 devices")
    jax.config.update("jax_num_cpu_devices", n)
    rows, _, _, _ = bench.measure(4096, n, ["reduce_broadcast"], bench.chain_length(4096, 50, n),
                               5, baseline=False)
    values = calibrate.in_process(dict(rows)["accl:reduce_broadcast"])
    print(f"# {n} devices in one process: "
          + ", ".join(f"{name}={v:.3g}" for name, v in values.items()))
    tables, measured = {}, []
    for processes in shapes:
        k = n // processes
        points = launch.run_job(["-m", "jax_accl.bench"], processes, k,
                                extra=["--calibrate", "--reps", str(args.reps)],
                                timeout=bench.JOB_TIMEOUT_S)[0]["points"]
        tables[f"{processes}x{k}"] = one_host_lines(points)
        measured += [(processes, k, p["ran"], p["bytes"], p["seconds"]) for p in points
                     if p["ran"] in calibrate.ONE_HOST_ALGORITHMS]
    fitted = calibrate.fit_one_host(measured)
    path = calibrate.store({**values, **fitted, "one_host": tables})
    print(f"# one host, model fitted to {len(measured)} points: "
          + ", ".join(f"{name}={v:.3g}" for name, v in fitted.items())
          + "; kept: " + (", ".join(sorted(set(calibrate.ONE_HOST) - set(fitted))) or "none"))
    for shape, lines in tables.items():
        processes, k = (int(x) for x in shape.split("x"))
        print_one_host_lines(processes, k, lines)
    print(f"# stored in {path}")
    for size in (4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20):
        print(f"#   {bench.human(size):>6}: {n} devices in one process -> "
              f"{_accl.choose_algorithm(n, size)}")
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
            latency, per_byte = calibrate.fit_line(measured)
            lines[ran.pop()] = {"latency": latency, "per_byte": per_byte, "measured": measured}
    return lines


def print_one_host_lines(processes: int, k: int, lines: dict) -> None:
    """Per size: each candidate's measured time (its line's), the choice and the model's."""
    from jax_accl import _accl
    algorithms = list(lines)
    print(f"# {processes}x{k} on this host, per op, measured (calibrated line):")
    print("# " + f"{'size':>6} " + "".join(f"{a:>22}" for a in algorithms)
          + f"{'auto':>18}{'model alone':>18}")
    cma = "reduce_broadcast" in algorithms
    for size in sorted({b for line in lines.values() for b, _ in line["measured"]}):
        cells = ""
        for a in algorithms:
            t = dict(lines[a]["measured"]).get(size)
            fit = lines[a]["latency"] + size * lines[a]["per_byte"]
            cells += (f"{t * 1e6:>11.0f}" if t else f"{'-':>11}") + f" ({fit * 1e6:>6.0f})us"
        auto = _accl.choose_one_host(processes, k, size, cma)
        print(f"# {bench.human(size):>6} {cells}{auto:>18}"
              f"{calibrate.model_choice(processes, k, size, algorithms):>18}")


def calibration_points(n: int, reps: int) -> list[dict]:
    """One process of `bench --calibrate`'s multi-process run: every algorithm of
    calibrate.ONE_HOST_ALGORITHMS forced over all n devices at every size of
    calibrate.ONE_HOST_SIZES, with the algorithm it ran."""
    points = []
    for size in calibrate.ONE_HOST_SIZES:
        algorithms = [a for a in calibrate.ONE_HOST_ALGORITHMS
                      if a != "direct" or size <= calibrate.DIRECT_MAX_BYTES]
        rows, _, ran, _ = bench.measure(size, n, algorithms, bench.chain_length(size, 0, n),
                                     reps, baseline=False)
        points += [{"algorithm": name[5:], "bytes": size, "seconds": t, "ran": ran[name]}
                   for name, t in rows]
    return points
