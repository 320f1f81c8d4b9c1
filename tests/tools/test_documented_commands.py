"""Every command the README and docs/ show exists and its flags parse: `python -m
jax_accl.<tool> ...` through the tool's own argument parser (without running it),
`bash scripts/<name>.sh ...` as a script of the checkout (demo.sh's flags through the
demo's parser, sanitize.sh's mode among those it builds). Metavariables (H, P, D),
optional `[...]` parts and `a|b` alternatives are expanded, `...` dropped."""

import itertools
import re
import shlex
from pathlib import Path

import pytest

from jax_accl.bench import cli as bench_cli
from jax_accl.bench import collectives as bench_collectives
from jax_accl.demo import training as demo
from jax_accl.plan import __main__ as plan

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
PARSERS = {
    "jax_accl.bench": bench_cli.parse_args,
    "jax_accl.bench.collectives": bench_collectives.parse_args,
    "jax_accl.demo": demo.parse_args,
    "jax_accl.plan": plan.parse_args,
}
METAVARIABLES = {"H": "2", "P": "2", "D": "2"}
COMMAND = re.compile(r"(python -m jax_accl[\w.]*|bash scripts/[\w.-]+)")


def documented_commands():
    """(document, command line) for every command in a code block (indented, or a fenced
    shell block) or a code span."""
    for path in DOCUMENTS:
        text = re.sub(r"\\\n\s*", " ", path.read_text())  # continued lines joined
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
                    yield path.name, piece[found.start() :].strip()


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


def check(command: str) -> None:
    for words in variants(grouped_optional_parts(command)):
        if words[0] == "python":
            tool, args = words[2], words[3:]
            if tool == "jax_accl.run":
                assert not args or args[0] == "-m" or args[0].endswith(".py"), command
            elif tool == "jax_accl.config":
                assert not args, command
            else:
                assert tool in PARSERS, f"{command}: no such tool"
                PARSERS[tool](args)  # argparse exits (SystemExit) on a bad flag
        else:
            script, args = REPO / words[1], words[2:]
            assert script.is_file(), f"{command}: no {script}"
            if script.name == "demo.sh":
                demo.parse_args(args)
            elif script.name == "sanitize.sh":
                assert args and args[0] in ("address", "thread", "undefined"), command
            elif script.name == "test.sh":
                assert not args or args[0] == "--fast", command


COMMANDS = sorted(set(documented_commands()))


def test_the_documents_show_the_commands_users_need():
    shown = {c for _, c in COMMANDS}
    assert len(COMMANDS) >= 40, COMMANDS
    for needed in ("bash scripts/test.sh --fast", "bash scripts/demo.sh"):
        assert any(c.startswith(needed) for c in shown), needed
    for tool in [*PARSERS, "jax_accl.run", "jax_accl.config"]:
        assert any(c.split()[2:3] == [tool] for c in shown), tool


@pytest.mark.parametrize("document,command", COMMANDS)
def test_a_documented_command_exists_and_its_flags_parse(document, command):
    try:
        check(command)
    except SystemExit as e:
        pytest.fail(f"{document}: `{command}`: its tool rejects the flags (exit {e.code})")
