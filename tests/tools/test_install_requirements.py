"""scripts/requirements.py: what scripts/install.sh installs into an environment before
building the checkout there (the build's requirements, the package's dependencies and
those of the extras asked for), read from pyproject.toml."""

import runpy
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = str(REPO / "scripts" / "requirements.py")


def listed(monkeypatch, capsys, *argv) -> list[str]:
    monkeypatch.setattr(sys, "argv", [SCRIPT, *argv])
    runpy.run_path(SCRIPT, run_name="__main__")
    return capsys.readouterr().out.splitlines()


def test_the_test_extra_brings_the_build_the_package_and_the_test_tools(monkeypatch, capsys):
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    out = listed(monkeypatch, capsys, "[test]")
    for requirement in (
        *project["build-system"]["requires"],
        *project["project"]["dependencies"],
        *project["project"]["optional-dependencies"]["test"],
    ):
        assert requirement in out
    assert "ruff==0.17.6" in out and "optax>=0.2" in out
    assert len(out) == len(set(out))  # each once (optax is in two lists)


def test_several_extras_and_none(monkeypatch, capsys):
    both = listed(monkeypatch, capsys, "[demo,bench]")
    assert "optax>=0.2" in both and "matplotlib>=3.7" in both
    plain = listed(monkeypatch, capsys, "")
    assert "optax>=0.2" not in plain and "nanobind>=2.4" in plain
    assert not any(r.startswith("jaxlib") and "<0.13" not in r for r in plain)


def test_an_unknown_extra_is_named(monkeypatch, capsys):
    with pytest.raises(SystemExit, match=r"no extra \['tset'\] in pyproject.toml"):
        listed(monkeypatch, capsys, "[tset]")


def test_missing_lists_only_what_this_environment_lacks(monkeypatch, capsys):
    """install.sh names and installs `--missing`'s list: nothing where every requirement
    is installed (the test extra, in the environment the tests run in), where it listed
    every requirement as missing."""
    assert listed(monkeypatch, capsys, "--missing", "[test]") == []
    monkeypatch.setattr(sys, "argv", [SCRIPT, "--missing", ""])
    script = runpy.run_path(SCRIPT, run_name="__main__")
    capsys.readouterr()
    assert script["installed"]("numpy>=1.26")
    assert not script["installed"]("numpy<1")  # installed, at a version not accepted
    assert not script["installed"]("no-such-package-of-jax-accl>=1")
