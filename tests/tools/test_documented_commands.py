"""Every command the README and docs/ show exists and its flags parse: `python -m
jax_accl.<tool> ...` through the tool's own argument parser (without running it),
`python examples/<name>.py ...` (also as `python <name>.py`, a copy on a host) through
the example's own `parse_args`, `python benchmarks/<name>.py ...` through the parser of
the tool the script runs, `bash scripts/<name>.sh ...` as a script of the checkout
(demo.sh's flags through the demo's parser, sanitize.sh's mode among those it builds).
The same for the commands in the docstrings of benchmarks/ and examples/ (what their
--help shows). A command under a launcher (`mpirun ... python x.py`, `srun ...`) is
checked as the Python command it wraps, and every `JAX_ACCL_*` variable a command line
sets (before the command, or in the launcher's `-x`/`--export`) is a knob and its value
parses. Metavariables (H, P, D), optional `[...]` parts and `a|b` alternatives are
expanded, `...` dropped."""

import ast
import importlib.util
import itertools
import re
import shlex
from pathlib import Path

import pytest

from jax_accl import config
from jax_accl.bench import cli as bench_cli
from jax_accl.bench import collectives as bench_collectives
from jax_accl.demo import moe as demo_moe
from jax_accl.demo import training as demo
from jax_accl.demo import wire_bf16 as demo_wire_bf16
from jax_accl.plan import __main__ as plan

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SCRIPTS = [*sorted((REPO / "benchmarks").glob("*.py")), *sorted((REPO / "examples").glob("*.py"))]
PARSERS = {
    "jax_accl.bench": bench_cli.parse_args,
    "jax_accl.bench.collectives": bench_collectives.parse_args,
    "jax_accl.demo": demo.parse_args,
    "jax_accl.demo.moe": demo_moe.parse_args,
    "jax_accl.demo.wire_bf16": demo_wire_bf16.parse_args,
    "jax_accl.plan": plan.parse_args,
}


def own_parser(directory: str, name: str):
    """<directory>/<name>'s own parse_args (the module imported, not run)."""
    path = REPO / directory / name
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.parse_args


# What each script of benchmarks/ runs (a new script must say here which parser is its).
BENCHMARK_PARSERS = {
    "allreduce.py": bench_cli.parse_args,
    "fault_tolerance.py": lambda args: own_parser("benchmarks", "fault_tolerance.py")(args),
    "jit_step.py": lambda args: demo.parse_args(["--jit", *args]),
    "one_call.py": lambda args: own_parser("benchmarks", "one_call.py")(args),
    "plan.py": plan.parse_args,
    "second_harness.py": lambda args: own_parser("benchmarks", "second_harness.py")(args),
}
METAVARIABLES = {"H": "2", "P": "2", "D": "2"}
EXAMPLES = "|".join(re.escape(p.name) for p in SCRIPTS if p.parent.name == "examples")
# (`python train.py`, a user's own script, is not one of ours.)
COMMAND = re.compile(
    rf"(python -m jax_accl[\w.]*|python benchmarks/[\w-]+\.py"
    rf"|python (?:examples/)?(?:{EXAMPLES})|bash scripts/[\w.-]+)"
)
KNOB_SETTING = re.compile(r"\b(JAX_ACCL_\w+)=(\S*)")


def documented_commands():
    """(document, launcher, command line) for every command in a code block (indented, or a
    fenced shell block) or a code span of the documents, and in the docstrings of the
    scripts; the launcher is what precedes the command on its line (variables, mpirun)."""
    texts = [(path.name, path.read_text()) for path in DOCUMENTS]
    texts += [
        (f"{path.parent.name}/{path.name}", ast.get_docstring(ast.parse(path.read_text())) or "")
        for path in SCRIPTS
    ]
    for name, text in texts:
        text = re.sub(r"\\\n\s*", " ", text)  # continued lines joined
        fenced = False
        for line in text.splitlines():
            if line.startswith("```"):  # shell blocks hold commands; others code or trees
                fenced = not fenced and line[3:].strip() in ("bash", "sh", "shell", "console")
                continue
            block = fenced or line.startswith("    ")
            codes = [line.split("#")[0]] if block else re.findall(r"`([^`]+)`", line)
            for piece in (p for code in codes for p in re.split(r";|&&", code)):
                found = COMMAND.search(piece)
                if found:
                    launcher = piece[: found.start()].strip()
                    yield name, launcher, piece[found.start() :].strip()


def variants(command: str):
    """The command's argument lists: metavariables filled in, each `[optional]` part with
    and without it, each `a|b` alternative."""
    words = [w for w in shlex.split(command) if w != "..."]
    choices = []
    for w in words:
        if w.startswith("[") and w.endswith("]"):
            choices.append([[], w[1:-1].split("\x00")])
        elif "|" in w:
            choices.append([[alternative] for alternative in w.split("|")])
        else:
            choices.append([[METAVARIABLES.get(w, w)]])
    for pick in itertools.product(*choices):
        yield [w for part in pick for w in part]


def grouped_optional_parts(command: str) -> str:
    """`[--plot x.png]` as one word, so that shlex keeps it together."""
    return re.sub(r"\[([^\]]*)\]", lambda m: "[" + m.group(1).replace(" ", "\x00") + "]", command)


def example_parser(name: str):
    """examples/<name>'s own parse_args (the module imported, not run)."""
    return own_parser("examples", name)


def script_parser(path: str):
    """The parser of `python <path>`: a script of benchmarks/, or an example, named with
    its directory or alone (the quick start copies examples/two_hosts.py to each host)."""
    script = REPO / path
    if script.parent.name == "benchmarks":
        assert script.is_file(), f"no {script}"
        assert script.name in BENCHMARK_PARSERS, f"{path}: which tool does it run?"
        return BENCHMARK_PARSERS[script.name]
    name = Path(path).name
    assert path in (name, f"examples/{name}"), f"{path}: not a script of the checkout"
    assert (REPO / "examples" / name).is_file(), f"no examples/{name}"
    return example_parser(name)


def check(command: str) -> None:
    for words in variants(grouped_optional_parts(command)):
        if words[0] == "python" and words[1].endswith(".py"):
            script_parser(words[1])(words[2:])  # argparse exits (SystemExit) on a bad flag
        elif words[0] == "python":
            tool, args = words[2], words[3:]
            if tool == "jax_accl.run":
                assert not args or args[0] == "-m" or args[0].endswith(".py"), command
            elif tool == "jax_accl.config":
                assert not args, command
            else:
                assert tool in PARSERS, f"{command}: no such tool"
                PARSERS[tool](args)
        else:
            script, args = REPO / words[1], words[2:]
            assert script.is_file(), f"{command}: no {script}"
            if script.name == "demo.sh":
                demo.parse_args(args)
            elif script.name == "sanitize.sh":
                assert args and args[0] in ("address", "thread", "undefined"), command
            elif script.name == "test.sh":
                assert not args or args[0] == "--fast", command


def check_launcher(launcher: str) -> None:
    """What precedes a command: variables it sets (JAX_ACCL_* must be knobs, their values
    must parse) and a launcher of its own (mpirun, srun) with the variables it exports."""
    for name, value in KNOB_SETTING.findall(launcher):
        assert name in config.KNOBS, f"{name}: no such knob (jax_accl/config.py)"
        config.KNOBS[name].parse(value.rstrip(","))
    words = [w for w in shlex.split(launcher) if not re.fullmatch(r"\w+=\S*", w)]
    # ("host 0:" labels a line in a docstring; `time` times the command.)
    assert not words or words[0] in ("mpirun", "srun", "time", "host"), f"{launcher}: runs what?"


COMMANDS = sorted(set(documented_commands()))


def test_the_documents_show_the_commands_users_need():
    shown = {c for _, _, c in COMMANDS}
    assert len(COMMANDS) >= 40, COMMANDS
    for needed in ("bash scripts/test.sh --fast", "bash scripts/demo.sh"):
        assert any(c.startswith(needed) for c in shown), needed
    for tool in [*PARSERS, "jax_accl.run", "jax_accl.config"]:
        assert any(c.split()[2:3] == [tool] for c in shown), tool
    # The quick start: a plain line per host, and under each launcher.
    readme = [(launcher, c) for document, launcher, c in COMMANDS if document == "README.md"]
    quick_start = [(launcher, c) for launcher, c in readme if c.startswith("python two_hosts.py")]
    assert any("--coordinator" in c for _, c in quick_start), quick_start
    for launcher in ("mpirun", "srun"):
        assert any(w.startswith(launcher) for w, _ in quick_start), (launcher, quick_start)
    for script in SCRIPTS:  # every script's docstring shows how to run it
        assert any(c.split()[1].endswith(script.name) for _, _, c in COMMANDS), script


@pytest.mark.parametrize("document,launcher,command", COMMANDS)
def test_a_documented_command_exists_and_its_flags_parse(document, launcher, command):
    try:
        check_launcher(launcher)
        check(command)
    except SystemExit as e:
        pytest.fail(f"{document}: `{command}`: its tool rejects the flags (exit {e.code})")
