#!/usr/bin/env bash
# The wheel on every Python it is built for and every jaxlib there (not in CI: about 10
# minutes a Python): for each of $PYTHONS (default 3.11 3.12 3.13, from pyenv or the
# system) builds the manylinux_2_28 wheel (scripts/build_wheel.sh, into $1, default
# dist/), unless a wheel of that Python is there already, and runs scripts/test_wheel.sh
# on it: jaxlib 0.10.2, 0.11.2 and 0.12.1 (on Python 3.11 0.10.2, the newest jaxlib it
# has). Prints one line per Python; any failure fails the script.
#   bash scripts/test_wheel_matrix.sh
#   PYTHONS="3.12 3.13" bash scripts/test_wheel_matrix.sh /tmp/wheels
set -euo pipefail
cd "$(dirname "$0")/.."
out="$(realpath -m "${1:-dist}")"
PYTHONS="${PYTHONS:-3.11 3.12 3.13}"
root="$(pyenv root 2>/dev/null || echo /root/.pyenv)"
summary=()
for version in $PYTHONS; do
  python=""
  for candidate in "$root/versions/$version"*/bin/python "/usr/bin/python$version"; do
    if "$candidate" -c 'import sys' >/dev/null 2>&1; then python="$candidate"; break; fi
  done
  [ -n "$python" ] || { echo "test_wheel_matrix.sh: no Python $version"; exit 1; }
  tag="cp${version/./}"
  wheel="$(ls "$out"/jax_accl-*-"$tag"-"$tag"-manylinux_*.whl 2>/dev/null | head -n 1 || true)"
  if [ -z "$wheel" ]; then
    wheel="$(PYTHON="$python" bash scripts/build_wheel.sh "$out" | tail -n 1)"
  fi
  echo "=== Python $version: $(basename "$wheel") ==="
  PYTHON="$python" bash scripts/test_wheel.sh "$wheel"
  summary+=("Python $version: $(basename "$wheel") passed")
done
printf '%s\n' "${summary[@]}"
