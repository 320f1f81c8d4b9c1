#!/usr/bin/env bash
# The README's main command: install jax_accl into a virtual environment and run the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet .
cd /tmp && "$OLDPWD/$VENV/bin/python" -m jax_accl.demo "$@"
