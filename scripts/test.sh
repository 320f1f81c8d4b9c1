#!/usr/bin/env bash
# The README's test command: install jax_accl and its test dependencies into a fresh
# virtual environment, then run the whole suite (native tier, then JAX tier).
set -euo pipefail
cd "$(dirname "$0")/.."
export VENV="${VENV:-.venv}"
bash scripts/install.sh "[test]"
# The benchmark's MPI baseline (Open MPI, mpi4py, mpi4jax), which a test runs.
bash scripts/install_mpi.sh
# The pytest launcher (not `python -m pytest`) keeps the source tree off sys.path, so
# the tests import the installed package with its compiled module.
"$VENV/bin/pytest" -q tests "$@"
# The native core alone, under AddressSanitizer and UBSan.
bash scripts/sanitize.sh address
