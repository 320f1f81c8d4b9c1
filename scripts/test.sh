#!/usr/bin/env bash
# The README's test command: install jax_accl and its test dependencies into the virtual
# environment $VENV (default .venv; created, or completed: scripts/install.sh), check the
# style, then run the whole suite and the sanitizers.
#
#   bash scripts/test.sh           # everything; what CI runs (.ci/run)
#   bash scripts/test.sh --fast    # everyday: into $VENV (default .venv, made or completed:
#                                  # scripts/install.sh), the fast tests, the style
#
# Further arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
export VENV="${VENV:-.venv}"
# Test files run side by side in $ACCL_TEST_WORKERS processes (pytest-xdist; a file's
# tests in one of them, in order): most tests wait on jobs, sockets and deadlines, so
# two at once take about 0.6x the time on 2 cores. 0: one after another.
workers="${ACCL_TEST_WORKERS:-2}"
if [ "${1:-}" = "--fast" ]; then
  shift
  # $VENV as it is (made by this script, by demo.sh, or missing) gets what the tests
  # need, then an incremental build of this checkout (build/: only what changed).
  bash scripts/install.sh "[test]"
  lint=0
  bash scripts/lint.sh || lint=1
  # The tests marked fast (tests/conftest.py): no processes started, no namespaced
  # hosts, no soak.
  "$VENV/bin/pytest" -q -n "$workers" --dist loadfile -m fast tests "$@"
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
"$VENV/bin/pytest" -q -n "$workers" --dist loadfile --durations=15 tests "$@"  # CI's hour
# The native core alone, under AddressSanitizer and UBSan (ACCL_SANITIZE=0 leaves it out:
# .ci/run runs it once, not once per Python, the native core being the same).
if [ "${ACCL_SANITIZE:-1}" != 0 ]; then bash scripts/sanitize.sh address; fi
if [ "$lint" != 0 ]; then echo "lint failed: see scripts/lint.sh for the fix commands"; exit 1; fi
