#!/usr/bin/env bash
# Creates the virtual environment $VENV (default .venv) with $PYTHON (default python3)
# and pip-installs this checkout into it, with the extras named in $1 (e.g. "[test]").
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet ".${1:-}"
