#!/usr/bin/env bash
# A C/C++ toolchain for an older glibc, from PyPI: the ziglang package's clang with the
# target x86_64-linux-gnu.$GLIBC (default 2.28) links against that glibc's symbol
# versions, and against libc++ and libc++abi statically (hidden inside each library), so
# what it builds needs neither a newer glibc nor the system's libstdc++. Installs ziglang
# into the virtual environment $1 and writes there bin/zig-cc, zig-c++, zig-ar and
# zig-ranlib, which CMake takes as CC, CXX, CMAKE_AR and CMAKE_RANLIB (scripts/build_wheel.sh).
# The target CPU is the baseline x86-64 (no -march=native): the AVX2 kernels are chosen at
# run time (xla_ffi/reduce/reduce.cc).
#   bash scripts/zig_toolchain.sh /tmp/tools        then CC=/tmp/tools/bin/zig-cc ...
set -euo pipefail
venv="$(realpath "$1")"
GLIBC="${GLIBC:-2.28}"
target="${ZIG_TARGET:-x86_64-linux-gnu.$GLIBC}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet "ziglang==0.17.*"
# The zig binary itself, not `python -m ziglang`: pip's isolated builds hide the venv's packages.
zig="$("$venv/bin/python" -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')"
for tool in cc c++ ar ranlib; do
  case "$tool" in
    cc | c++) args="$tool -target $target" ;;
    *) args="$tool" ;;
  esac
  printf '#!/bin/sh\nexec "%s" %s "$@"\n' "$zig" "$args" >"$venv/bin/zig-$tool"
  chmod +x "$venv/bin/zig-$tool"
done
echo "zig_toolchain.sh: zig $("$zig" version) for $target in $venv/bin"
