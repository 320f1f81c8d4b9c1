"""examples/two_hosts.py, the README's multi-host quick start, run as a user runs it on
two hosts (one plain `python` line per host with the coordinator's address, the rails
named), here on two namespaced hosts with two rails: it trains, its step holds no XLA
collective, and both rails carried its all-reduces."""

import ast
import re
import subprocess
import sys
from pathlib import Path

from jax_accl.testing import launch, netns

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "two_hosts.py"


def test_the_two_host_example_trains_over_both_rails(root_required):
    with netns.virtual_hosts(2, 2) as names:
        coordinator = f"{netns.rail_ip(0, 0)}:{launch.free_port(netns.rail_ip(0, 0))}"
        procs = [
            subprocess.Popen(
                ["ip", "netns", "exec", ns, sys.executable, str(EXAMPLE)]
                + ["--coordinator", coordinator, "--num-processes", "2", "--process-id", str(i)]
                + ["--devices", "2", "--steps", "20"],
                env=launch.worker_env({"JAX_ACCL_RAILS": "rail0,rail1", "JAX_ACCL_HOST_ID": ns}),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                cwd="/",
            )
            for i, ns in enumerate(names)
        ]
        notes = launch.wait_for(procs, timeout=300)
        outputs = [p.stdout.read() + notes.get(i, "") for i, p in enumerate(procs)]
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out[-3000:]
    losses = []
    for out in outputs:
        print(out)
        first, last = map(float, re.search(r"loss (\S+) -> (\S+)", out).groups())
        assert last < 0.8 * first, out
        losses.append(last)
        report = ast.literal_eval(re.search(r"collectives: (\{.*\})", out).group(1))
        assert report["xla"] == {} and report["jax_accl"].get("accl_allreduce", 0) >= 1, report
        sent = ast.literal_eval(re.search(r"per transport: (\{.*\})", out).group(1))
        assert sent.get("tcp:rail0", 0) > 0 and sent.get("tcp:rail1", 0) > 0, sent
    assert losses[0] == losses[1], losses  # one replicated model
