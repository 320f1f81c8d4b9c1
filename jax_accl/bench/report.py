"""The benchmark's output: rows in nccl-tests units, the table, the notes under it and
the plot."""

from __future__ import annotations

import json
import sys

from jax_accl.bench.load import busy_note
from jax_accl.units import human


def nccl_row(row: dict, baseline_seconds: float) -> dict:
    """Adds algbw = S/t, busbw = algbw·2(n-1)/n and the speedup over the baseline."""
    n, t = row["devices"], row["seconds_per_op"]
    algbw = row["size_bytes"] / t / 1e9
    return {
        **row,
        "algbw_gbs": algbw,
        "busbw_gbs": algbw * 2 * (n - 1) / n,
        "speedup_vs_baseline": baseline_seconds / t,
    }


def job_rows(results: list[dict]) -> list[dict]:
    """Process 0's rows of a multi-process job, each with the CPU seconds per op of every
    process of the job summed (each process measured its own, all its threads)."""
    cpu = {}
    for result in results:
        for r in result["rows"]:
            key = (r["size_bytes"], r["variant"])
            cpu[key] = cpu.get(key, 0.0) + r["cpu_s_per_op"]
    return [{**r, "cpu_s_per_op": cpu[(r["size_bytes"], r["variant"])]} for r in results[0]["rows"]]


def auto_vs_best(rows: list[dict]) -> list[str]:
    """Per size: which algorithm the automatic choice ran, and how far its time is from
    the best forced algorithm's (where both are the same algorithm, the ratio is noise)."""
    lines = []
    for size in sorted({r["size_bytes"] for r in rows}):
        at = {r["variant"]: r["seconds_per_op"] for r in rows if r["size_bytes"] == size}
        forced = {  # algorithms forced, float32 on the wire (no +bf16)
            k: v
            for k, v in at.items()
            if k.startswith("accl:") and k != "accl:auto" and "+" not in k
        }
        if "accl:auto" in at and forced:
            best = min(forced, key=forced.get)
            chosen = next(
                r["ran"] for r in rows if r["size_bytes"] == size and r["variant"] == "accl:auto"
            )
            line = (
                f"{human(size)}: auto ran {chosen}, {at['accl:auto'] / forced[best]:.2f}x "
                f"the best forced ({best[5:]})"
            )
            if f"accl:{chosen}" in forced and best != f"accl:{chosen}":
                line += f"; {chosen} forced: {forced[f'accl:{chosen}'] / forced[best]:.2f}x"
            lines.append(line)
    return lines


# The limits a row may carry (bench/memory.py, the multi-host job), as plotted lines.
LIMIT_LINES = [
    ("memory_limit_s", "memory limit (copy)", "--"),
    ("memory_limit_stream_s", "memory limit (non-temporal copy)", ":"),
    ("link_limit_s", "network limit (all rails)", "--"),
    ("wire_limit_s", "network limit (measured wire)", "--"),
]


def plot(rows: list[dict], path: str, title: str) -> tuple[list[str], list[str]]:
    """busbw against size, one line per variant (matplotlib), and the busbw at each limit
    the rows carry as a dashed line; sizes labelled in KiB/MiB. Returns the lines' labels
    and the size labels."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install 'jax_accl[bench]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for variant in dict.fromkeys(r["variant"] for r in rows):
        mine = [r for r in rows if r["variant"] == variant]
        ax.plot(
            [r["size_bytes"] for r in mine],
            [r["busbw_gbs"] for r in mine],
            marker="o",
            label=variant.replace("accl:", "jax_accl "),
        )
    first = rows[0]["variant"]
    at_sizes = [r for r in rows if r["variant"] == first]
    for key, name, style in LIMIT_LINES:
        if all(key in r for r in at_sizes):
            n = at_sizes[0]["devices"]
            ax.plot(
                [r["size_bytes"] for r in at_sizes],
                [r["size_bytes"] / r[key] / 1e9 * 2 * (n - 1) / n for r in at_sizes],
                linestyle=style,
                color="grey",
                label=name,
            )
    ax.set_xscale("log", base=2)
    sizes = sorted({r["size_bytes"] for r in rows})
    ax.set_xticks(sizes, [human(s) for s in sizes])
    ax.set_xlabel("bytes per device")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    labels = [line.get_label() for line in ax.get_lines()]
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    plt.close(fig)
    return labels, ticks


def print_rows(rows: list[dict], limits, out) -> None:
    """limits: [(column, seconds of row)], time / limit in each column. "1-call": one
    launch holding one all-reduce of its argument; "in step": what one all-reduce adds to
    a launch that computes its operand (sweep.one_call_interleaved). "CPU/op": the
    CPU seconds per op (user + system) of every process of the job, where rows carry it."""
    cpu = all("cpu_s_per_op" in r for r in rows)
    step = any("in_step_s" in r for r in rows)  # not on mpi4jax's rows
    print(
        f"{'size':>8} {'variant':>24} {'time/op':>11} {'algbw GB/s':>10} "
        f"{'busbw GB/s':>10} {'vs base':>8} "
        + "".join(f"{name:>11} " for name, _ in limits)
        + f"{'1-call':>10}"
        + (f" {'in step':>10}" if step else "")
        + (f" {'CPU/op':>11}" if cpu else "")
    )
    for r in rows:
        t = r["seconds_per_op"]
        print(
            f"{human(r['size_bytes']):>8} {r['variant']:>24} {t * 1e6:>9.1f}us "
            f"{r['algbw_gbs']:>10.3f} {r['busbw_gbs']:>10.3f} {r['speedup_vs_baseline']:>7.2f}x "
            + "".join(f"{t / limit(r):>10.2f}x " for _, limit in limits)
            + f"{r['single_call_s'] * 1e6:>8.0f}us"
            + (
                (f" {r['in_step_s'] * 1e6:>8.0f}us" if "in_step_s" in r else f"{'-':>11}")
                if step
                else ""
            )
            + (f" {r['cpu_s_per_op'] * 1e6:>9.1f}us" if cpu else "")
        )
        if out:
            out.write(json.dumps(r) + "\n")
    fresh = {r["size_bytes"]: r["fresh_result_s"] for r in rows if "fresh_result_s" in r}
    for size, seconds in fresh.items():
        print(
            f"# {human(size)}: a launch that only writes a fresh result of that size "
            f"(x * 0.5, what 1-call and in step pay besides the all-reduce): {seconds * 1e3:.2f} ms"
        )
    for line in auto_vs_best(rows):
        print("#", line)
    if busy_note():
        print("#", busy_note())
    sys.stdout.flush()


def print_phases(rows: list[dict]) -> None:
    """Process 0's time per call in each tier of the hierarchy, for jax_accl's auto rows."""
    for r in rows:
        phases = r.get("phase_s")
        if r["variant"] == "accl:auto" and phases and any(phases.values()):
            print(
                f"# {human(r['size_bytes'])} accl:auto ({r.get('ran', '?')}) per call: "
                f"local reduce-scatter {phases['local_reduce_scatter'] * 1e3:.2f} ms, "
                f"between hosts {phases['between_hosts'] * 1e3:.2f} ms, "
                f"local all-gather {phases['local_all_gather'] * 1e3:.2f} ms"
            )
