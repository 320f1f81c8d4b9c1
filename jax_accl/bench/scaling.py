"""Weak scaling (`bench --hosts 2,4,8,16`): the same buffer per device on more and more
namespaced hosts, one job per host count, jax_accl and jax.lax.psum (gloo, on rail 0)
timed in the same job; per point the bus bandwidth of a host (2(H-1)/H of a device's
buffer over its time: what a host must send and receive at least once), the time against
the network limit of the rails each uses, and beside it the runtime's plan and predicted
time for the layout (jax_accl.plan, the wire the job states)."""

from __future__ import annotations

import json

from jax_accl.plan import places_of, runtime_plan
from jax_accl.plan.topology import payload_share
from jax_accl.units import human


def host_busbw(hosts: int, size: int, seconds: float) -> float:
    """Bytes per second a host moves each way: 2(H-1)/H of the buffer over the time."""
    return 2 * (hosts - 1) / hosts * size / seconds if seconds > 0 else 0.0


def prediction(layout, size: int, rails: int, rate_mbit: float, mtu: int) -> dict:
    """The runtime's plan and predicted time for `layout` on rails shaped to `rate_mbit`
    (the payload rate the job states, netns.stated_wire)."""
    model = {"net_beta": 8.0 / (rate_mbit * 1e6 * payload_share(mtu))} if rate_mbit else {}
    plan = runtime_plan(places_of(layout), size, rails=rails, model=model)
    return {"plan": plan.summary(), "between": plan.between, "predicted_s": plan.predicted_s}


def points(rows: list[dict], hosts: int, layout, rails: int, rate_mbit: float, mtu: int):
    """One point per size of a job's rows: jax_accl auto's and gloo's time, each against
    its limit (jax_accl: every rail; gloo: rail 0 alone), and the planner's prediction."""
    rate = rate_mbit * 1e6 / 8
    out = []
    for size in sorted({r["size_bytes"] for r in rows}):
        at = {r["variant"]: r for r in rows if r["size_bytes"] == size}
        accl, gloo = at.get("accl:auto"), at.get("jax.lax.psum")
        if accl is None:
            continue
        limit = 2 * (hosts - 1) / hosts * size / (rails * rate) if rate else 0.0
        point = {
            "hosts": hosts,
            "layout": "x".join(map(str, (hosts, len(layout[0]), layout[0][0]))),
            "size_bytes": size,
            "rails": rails,
            "accl_s": accl["seconds_per_op"],
            "accl_busbw": host_busbw(hosts, size, accl["seconds_per_op"]),
            "accl_vs_limit": accl["seconds_per_op"] / limit if limit else 0.0,
            "ran": accl.get("ran", ""),
            **prediction(layout, size, rails, rate_mbit, mtu),
        }
        point["measured_vs_predicted"] = point["accl_s"] / point["predicted_s"]
        if gloo is not None:
            point["gloo_s"] = gloo["seconds_per_op"]
            point["gloo_busbw"] = host_busbw(hosts, size, gloo["seconds_per_op"])
            point["gloo_vs_limit"] = gloo["seconds_per_op"] / (limit * rails) if limit else 0.0
        out.append(point)
    return out


def print_points(pts: list[dict], out=None) -> None:
    print(
        f"\n# weak scaling: {'hosts':>5} {'layout':>7} {'size':>7} {'jax_accl':>10} "
        f"{'x limit':>8} {'busbw/host':>11} {'predicted':>10} {'meas/pred':>9} "
        f"{'gloo':>10} {'x its limit':>11} {'busbw/host':>11}  between hosts"
    )
    for p in pts:
        gloo = (
            f"{p['gloo_s'] * 1e3:>8.1f}ms {p['gloo_vs_limit']:>10.2f}x "
            f"{p['gloo_busbw'] / 1e6:>7.1f}MB/s"
            if "gloo_s" in p
            else f"{'-':>10} {'-':>11} {'-':>11}"
        )
        print(
            f"# weak scaling: {p['hosts']:>5} {p['layout']:>7} {human(p['size_bytes']):>7} "
            f"{p['accl_s'] * 1e3:>8.1f}ms {p['accl_vs_limit']:>7.2f}x "
            f"{p['accl_busbw'] / 1e6:>7.1f}MB/s {p['predicted_s'] * 1e3:>8.1f}ms "
            f"{p['measured_vs_predicted']:>8.2f}x {gloo}  {p['between']}"
        )
        if out:
            out.write(json.dumps({"weak_scaling": p}) + "\n")


def plot(pts: list[dict], path: str, rate_mbit: float, title: str) -> None:
    """busbw per host against hosts, per size: jax_accl measured and predicted, gloo, and
    the rails' limits (every rail, and one)."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install 'jax_accl[bench]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for size in sorted({p["size_bytes"] for p in pts}):
        mine = sorted((p for p in pts if p["size_bytes"] == size), key=lambda p: p["hosts"])
        hosts = [p["hosts"] for p in mine]
        line = ax.plot(
            hosts,
            [p["accl_busbw"] / 1e6 for p in mine],
            marker="o",
            label=f"jax_accl {human(size)}",
        )[0]
        ax.plot(
            hosts,
            [host_busbw(p["hosts"], size, p["predicted_s"]) / 1e6 for p in mine],
            linestyle=":",
            marker="x",
            color=line.get_color(),
            label=f"planner {human(size)}",
        )
        gloo = [p for p in mine if "gloo_busbw" in p]
        if gloo:
            ax.plot(
                [p["hosts"] for p in gloo],
                [p["gloo_busbw"] / 1e6 for p in gloo],
                marker="s",
                linestyle="--",
                label=f"gloo (rail 0) {human(size)}",
            )
    if rate_mbit:
        rails = max(p["rails"] for p in pts)
        for count, style in ((rails, "-"), (1, "--")):
            ax.axhline(
                rate_mbit / 8 * count,
                color="grey",
                linestyle=style,
                linewidth=0.8,
                label=f"network limit, {count} rail{'s' if count > 1 else ''}",
            )
    hosts = sorted({p["hosts"] for p in pts})
    ax.set_xscale("log", base=2)
    ax.set_xticks(hosts, [str(h) for h in hosts])
    ax.set_xlabel("hosts")
    ax.set_ylabel("busbw per host (MB/s)")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
