"""bench --hosts 2,4,8,16 (weak scaling): the command line, each point's numbers against
the rails' limits and the planner, the table and the plot (no jobs run here)."""

import io
import json

import pytest

from jax_accl.bench import cli, scaling


def test_several_host_counts_parse_into_a_scaling_run():
    args = cli.parse_args(["--hosts", "2,4,8,16", "--processes-per-host", "1"])
    assert args.host_counts == [2, 4, 8, 16] and args.hosts == 2
    assert cli.parse_args(["--hosts", "3"]).host_counts == [3]
    for bad in (
        ["--hosts", "2,x"],
        ["--hosts", "1,2"],
        ["--hosts", "2,4", "--processes-per-host", "1,2"],
    ):
        with pytest.raises(SystemExit):
            cli.parse_args(bad)


def rows(hosts, accl_s, gloo_s, size=4 << 20):
    return [
        {"size_bytes": size, "variant": "accl:auto", "seconds_per_op": accl_s, "ran": "x"},
        {"size_bytes": size, "variant": "jax.lax.psum", "seconds_per_op": gloo_s},
    ]


def test_points_against_the_limits_and_the_planner(tmp_path):
    size, rate_mbit = 4 << 20, 300.0
    limit = 2 * 7 / 8 * size / (2 * rate_mbit * 1e6 / 8)  # 8 hosts, both rails
    (p,) = scaling.points(rows(8, 1.1 * limit, 2.2 * limit), 8, [[1]] * 8, 2, rate_mbit, 1500)
    assert p["accl_vs_limit"] == pytest.approx(1.1)
    assert p["gloo_vs_limit"] == pytest.approx(1.1)  # gloo: rail 0 alone
    assert p["accl_busbw"] == pytest.approx(2 * 7 / 8 * size / (1.1 * limit))
    assert p["between"] == "ring" and p["predicted_s"] > limit
    assert p["measured_vs_predicted"] == pytest.approx(p["accl_s"] / p["predicted_s"])
    out = io.StringIO()
    scaling.print_points([p], out)
    assert json.loads(out.getvalue())["weak_scaling"]["hosts"] == 8
    pytest.importorskip("matplotlib")
    pts = [
        q
        for h in (2, 4, 8)
        for q in scaling.points(rows(h, 0.1, 0.3), h, [[1]] * h, 2, rate_mbit, 1500)
    ]
    scaling.plot(pts, str(tmp_path / "scaling.png"), rate_mbit, "weak scaling")
    assert (tmp_path / "scaling.png").stat().st_size > 0


def test_a_failed_job_keeps_the_other_points(monkeypatch, capsys):
    """16 hosts x 64 MiB outgrew this machine's memory: that job's failure is reported and
    the other host counts' points are still printed; the exit status says it."""

    def job(args, per_host, rails, rate, chunks, out, progress):
        if args.hosts == 4:
            raise RuntimeError("multi-process job -m jax_accl.bench failed:\n(process killed)")
        return rows(args.hosts, 0.1, 0.3)

    monkeypatch.setattr(cli, "multi_host_job", job)
    args = cli.parse_args(
        ["--hosts", "2,4,8", "--processes-per-host", "1", "--rails", "2", "--rate-mbit", "300"]
    )
    out = io.StringIO()
    assert cli.weak_scaling_main(args, out) == 1
    printed = capsys.readouterr().out
    assert "# 4 hosts: the job failed, no points: multi-process job" in printed
    assert sorted(
        json.loads(line)["weak_scaling"]["hosts"] for line in out.getvalue().split("\n") if line
    ) == [2, 8]
