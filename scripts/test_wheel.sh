#!/usr/bin/env bash
# One wheel on every supported jaxlib, installed where no compiler is: builds the wheel
# once (scripts/build_wheel.sh; or takes the one named as $1), then for each jaxlib of
# $JAXLIBS (default 0.10.2, 0.11.2 and 0.12.1: FFI 0.3, 0.4 and 0.5, each with its own
# jax; on Python 3.11 0.10.2 alone: jax 0.11 and later need Python 3.12) installs it,
# binary packages only, into a fresh virtual environment of $PYTHON (default python3.12),
# and there runs tests/wheel/allreduce_job.py (2 processes x 2 devices, a jax_accl.psum) and
# the demo (2 steps, optax installed as a binary too) with a PATH on which neither a
# compiler nor CMake is found. Any failure fails the script.
#   PYTHON=python3.12 bash scripts/test_wheel.sh            (a step of .ci/run)
#   bash scripts/test_wheel.sh dist/jax_accl-0.1.0-cp312-cp312-manylinux_2_28_x86_64.whl
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
PYTHON="${PYTHON:-python3.12}"
if "$PYTHON" -c 'import sys; sys.exit(sys.version_info >= (3, 12))'; then
  JAXLIBS="${JAXLIBS:-0.10.2}"  # the newest jaxlib with wheels for Python 3.11
fi
JAXLIBS="${JAXLIBS:-0.10.2 0.11.2 0.12.1}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if [ -n "${1:-}" ]; then
  wheel="$(realpath "$1")"
else
  wheel="$(PYTHON="$PYTHON" bash scripts/build_wheel.sh "$work/dist" | tail -n 1)"
fi
echo "test_wheel.sh: $(basename "$wheel")"
# Installable where glibc is 2.28 (RHEL 8): its tag manylinux_2_28 or older (a wheel of
# WHEEL_TOOLCHAIN=system, CI's, any manylinux tag: it is built for this machine's glibc).
glibc_minor="$(basename "$wheel" | sed -n 's/.*manylinux_2_\([0-9]*\)_x86_64\.whl$/\1/p')"
oldest=28
[ "${WHEEL_TOOLCHAIN:-zig}" = zig ] || oldest=99
if [ -z "$glibc_minor" ] || [ "$glibc_minor" -gt "$oldest" ]; then
  echo "FAILED: $wheel is not tagged manylinux_2_$oldest or older"; exit 1
fi

# A PATH without compilers: every command of the usual directories but these.
nocc="$work/bin-without-compilers"
mkdir -p "$nocc"
for dir in /usr/local/bin /usr/bin /bin; do
  for tool in "$dir"/*; do
    name="$(basename "$tool")"
    case "$name" in
      cc | c++ | c89* | c99* | cpp* | gcc* | g++* | *-gcc* | *-g++* | clang* | ld | ld.* | as | \
        cmake* | ctest | ninja | make | gmake | tcc | icx | icpx) continue ;;
    esac
    [ -e "$nocc/$name" ] || ln -s "$tool" "$nocc/$name"
  done
done

for version in $JAXLIBS; do
  venv="$work/venv-$version"
  echo "=== jax and jaxlib $version: a fresh virtual environment, the wheel, binaries only ==="
  "$PYTHON" -m venv "$venv"
  path="$venv/bin:$nocc"
  for compiler in cc c++ gcc g++ clang cmake; do
    if PATH="$path" command -v "$compiler" >/dev/null; then
      echo "FAILED: $compiler is on the PATH meant to have no compiler"; exit 1
    fi
  done
  PATH="$path" "$venv/bin/python" -m pip install --quiet --only-binary=:all: \
    "$wheel" "jax==$version" "jaxlib==$version"
  # From a directory without the checkout: the installed wheel is what is imported.
  (cd "$work" && PATH="$path" "$venv/bin/python" "$repo/tests/wheel/allreduce_job.py")
  # Every module the wheel ships imports (the tools' extras aside); no test harness in it.
  (cd "$work" && PATH="$path" "$venv/bin/python" "$repo/tests/wheel/modules.py")
  # The demo as a user of the wheel runs it (its extra, optax, from binaries too).
  PATH="$path" "$venv/bin/python" -m pip install --quiet --only-binary=:all: "optax>=0.2"
  (cd "$work" && PATH="$path" "$venv/bin/python" -m jax_accl.demo --steps 2) >"$work/demo.log" 2>&1 ||
    { cat "$work/demo.log"; echo "FAILED: the demo on jaxlib $version"; exit 1; }
  grep -q "^final loss" "$work/demo.log" ||
    { cat "$work/demo.log"; echo "FAILED: the demo printed no final loss"; exit 1; }
  echo "demo: $(grep '^final loss' "$work/demo.log")"
done
echo "test_wheel.sh: $(basename "$wheel") passed on jaxlib ${JAXLIBS// /, }"
