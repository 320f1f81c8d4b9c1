#!/usr/bin/env bash
# The README's main command: install jax_accl into a virtual environment and run the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
export VENV="${VENV:-.venv}"
bash scripts/install.sh "[demo]"
venv_python="$(cd "$(dirname "$VENV")" && pwd)/$(basename "$VENV")/bin/python"
cd /tmp && "$venv_python" -m jax_accl.demo "$@"
