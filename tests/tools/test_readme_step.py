"""The README's snippets of "Switching a training step" run as copied: the step, then the
loop, with a model of the user's (local_loss, params, batches) on this process's 8 CPU
devices. The loop places the state and the batch on the mesh, without which jax's
default Explicit mesh refuses the step's in_specs."""

import re
from pathlib import Path

import numpy as np

README = Path(__file__).resolve().parents[2] / "README.md"


def step_snippets() -> list[str]:
    """The python blocks of the README's section "Switching a training step"."""
    section = README.read_text().split("## Switching a training step", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def local_loss(params, x, y):
    return ((x @ params["w"] - y) ** 2).mean()


def test_the_step_and_its_loop_run_as_copied(capsys):
    step, loop = step_snippets()
    scope = {"local_loss": local_loss}
    exec(step, scope)
    params = {"w": np.zeros((4, 1), np.float32)}
    batch = (np.ones((16, 4), np.float32), np.ones((16, 1), np.float32))
    scope.update(params=params, opt_state=scope["optimizer"].init(params), batches=[batch] * 2)
    exec(loop, scope)
    assert capsys.readouterr().out == "0 1.0\n"  # the loss of zero weights, read at step 0
    assert float(np.asarray(scope["params"]["w"]).sum()) != 0  # two steps were taken
