"""Prints, one a line, what scripts/install.sh installs before building the checkout
without build isolation: the build's requirements (pyproject.toml's build-system, and
CMake and Ninja from PyPI where none is on PATH), the package's dependencies and those of
the extras named in argv[1] (e.g. "[test]" or "[demo,bench]"). With --missing first,
only those the running interpreter does not have installed at a version they accept."""

import importlib.metadata
import shutil
import sys
import tomllib
from pathlib import Path

try:
    from packaging.requirements import Requirement
except ImportError:  # a fresh environment: pip's copy
    from pip._vendor.packaging.requirements import Requirement


def installed(requirement: str) -> bool:
    """Whether this interpreter has `requirement` at a version it accepts."""
    wanted = Requirement(requirement)
    try:
        version = importlib.metadata.version(wanted.name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return wanted.specifier.contains(version, prereleases=True)


missing_only = sys.argv[1:2] == ["--missing"]
if missing_only:
    del sys.argv[1]

pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
project = pyproject["project"]
extras = (
    [e.strip() for e in sys.argv[1].strip("[]").split(",") if e.strip()] if sys.argv[1:] else []
)
unknown = set(extras) - set(project["optional-dependencies"])
if unknown:
    raise SystemExit(f"requirements.py: no extra {sorted(unknown)} in pyproject.toml")
requirements = list(pyproject["build-system"]["requires"])
requirements += [tool for tool in ("cmake>=3.18", "ninja") if not shutil.which(tool.split(">")[0])]
requirements += project["dependencies"]
for extra in extras:
    requirements += project["optional-dependencies"][extra]
requirements = list(dict.fromkeys(requirements))
if missing_only:
    requirements = [r for r in requirements if not installed(r)]
if requirements:
    print("\n".join(requirements))
