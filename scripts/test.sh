#!/usr/bin/env bash
# The README's test command: install jax_accl and its test dependencies into a fresh
# virtual environment, check the style, then run the whole suite and the sanitizers.
#
#   bash scripts/test.sh           # everything; what CI runs (.ci/run)
#   bash scripts/test.sh --fast    # everyday: rebuild into $VENV, the fast tests, the style
#
# Further arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
export VENV="${VENV:-.venv}"
if [ "${1:-}" = "--fast" ]; then
  shift
  # The environment once, then incremental builds of this checkout: without build
  # isolation the CMake tree in build/ stays valid, and only what changed is compiled.
  [ -x "$VENV/bin/python" ] || bash scripts/install.sh "[test]"
  "$VENV/bin/python" -m pip install --quiet "scikit-build-core>=0.10" "nanobind>=2.4"
  "$VENV/bin/python" -m pip install --quiet --no-deps --no-build-isolation .
  lint=0
  bash scripts/lint.sh || lint=1
  # The tests marked fast (tests/conftest.py): no processes started, no namespaced
  # hosts, no soak.
  "$VENV/bin/pytest" -q -m fast tests "$@"
  if [ "$lint" != 0 ]; then echo "lint failed: see scripts/lint.sh for the fix commands"; exit 1; fi
  exit 0
fi
bash scripts/install.sh "[test]"
# The benchmark's MPI baseline (Open MPI, mpi4py, mpi4jax), which a test runs.
bash scripts/install_mpi.sh
# Style: ruff and clang-format; a violation fails the command, after the tests ran.
lint=0
bash scripts/lint.sh || lint=1
# The pytest launcher (not `python -m pytest`) keeps the source tree off sys.path, so
# the tests import the installed package with its compiled module.
"$VENV/bin/pytest" -q tests "$@"
# The native core alone, under AddressSanitizer and UBSan.
bash scripts/sanitize.sh address
if [ "$lint" != 0 ]; then echo "lint failed: see scripts/lint.sh for the fix commands"; exit 1; fi
