#!/usr/bin/env bash
# Installs this checkout into the virtual environment $VENV (default .venv), with the
# dependencies of the extras named in $1 (e.g. "[test]"). Creates $VENV with $PYTHON
# (default python3) where it does not exist; otherwise installs into it what is missing, so
# the README's scripts work after one another in any order. The native module is built
# without build isolation, incrementally in build/: a second run compiles only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"
extras="${1:-}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "install.sh: creating the virtual environment $VENV ($("$PYTHON" --version 2>&1))"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
fi
if ! "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "install.sh: $VENV has Python $("$VENV/bin/python" --version 2>&1); jax_accl needs >= 3.11:"
  echo "  remove $VENV, or set VENV to another path, and run with PYTHON=/path/to/python3.11"
  exit 1
fi
# Only what the environment lacks (or has at a version not accepted) is named and installed.
listed="$("$VENV/bin/python" scripts/requirements.py --missing "$extras")"
if [ -z "$listed" ]; then
  echo "install.sh: $VENV has every requirement"
else
  mapfile -t requirements <<<"$listed"
  echo "install.sh: into $VENV, what it is missing: ${requirements[*]}"
  "$VENV/bin/python" -m pip install --quiet "${requirements[@]}"
fi
echo "install.sh: building this checkout into $VENV (incremental, in build/)"
"$VENV/bin/python" -m pip install --quiet --no-deps --no-build-isolation .
