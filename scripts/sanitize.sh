#!/usr/bin/env bash
# Builds the native self-test (no Python) under a sanitizer and runs it:
#   bash scripts/sanitize.sh address   # ASan + UBSan (part of scripts/test.sh, so of CI)
#   bash scripts/sanitize.sh thread    # TSan (documented run)
set -euo pipefail
cd "$(dirname "$0")/.."
kind="${1:-address}"
build="$(mktemp -d)/selftest-$kind"
cmake -S . -B "$build" -DACCL_PYTHON_MODULE=OFF -DACCL_SELFTEST=ON -DACCL_SANITIZE="$kind" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target accl_selftest -j 2 >/dev/null  # the MPI library is in it
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1 \
  TSAN_OPTIONS=halt_on_error=1 "$build/accl_selftest"
