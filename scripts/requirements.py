"""Prints, one a line, what scripts/install.sh installs before building the checkout
without build isolation: the build's requirements (pyproject.toml's build-system, and
CMake and Ninja from PyPI where none is on PATH), the package's dependencies and those of
the extras named in argv[1] (e.g. "[test]" or "[demo,bench]")."""

import shutil
import sys
import tomllib
from pathlib import Path

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
print("\n".join(dict.fromkeys(requirements)))
