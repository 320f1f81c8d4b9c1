#!/usr/bin/env bash
# What a manylinux_2_28 wheel of jax_accl may need of the system, checked on the wheel's
# every shared library (the extension, the core, the MPI library): no glibc symbol version
# newer than $GLIBC (default 2.28), no C++ runtime of the system (libstdc++, libgcc_s: the
# wheel's libc++ is linked in), nothing but glibc's libraries and the wheel's own among
# those it needs, and nothing auditwheel repair grafted in (no jax_accl.libs/). With
# $ZIG_CC (scripts/zig_toolchain.sh's zig-cc, as scripts/build_wheel.sh passes it), also a
# link against glibc $GLIBC's own libraries (zig's, made from glibc's symbol lists): a
# program that loads every library of the wheel, each undefined symbol of theirs to be found
# at its version in glibc $GLIBC, the wheel's core, or the Python C API (a stand-in).
#   bash scripts/check_wheel.sh dist/jax_accl-0.1.0-cp312-cp312-manylinux_2_28_x86_64.whl
set -euo pipefail
wheel="$(realpath "$1")"
GLIBC="${GLIBC:-2.28}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && python3 -m zipfile -e "$wheel" .)
fail() { echo "check_wheel.sh: FAILED: $*"; exit 1; }
if compgen -G "$work/*.libs" >/dev/null; then fail "auditwheel grafted $(ls -d "$work"/*.libs)"; fi
libraries=$(cd "$work" && find . -name '*.so*' -type f | sort)
[ -n "$libraries" ] || fail "no shared library in the wheel"
for lib in $libraries; do
  newest=$(objdump -T "$work/$lib" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1)
  if [ "$(printf '%s\n%s\n' "$newest" "$GLIBC" | sort -V | tail -n 1)" != "$GLIBC" ]; then
    fail "$lib needs GLIBC_$newest (newer than $GLIBC)"
  fi
  if objdump -T "$work/$lib" | grep -Eq 'GLIBCXX_|CXXABI_|GCC_[0-9]'; then
    fail "$lib needs the system's C++ runtime: $(objdump -T "$work/$lib" | grep -Eo '(GLIBCXX|CXXABI|GCC)_[0-9.]+' | sort -u | tr '\n' ' ')"
  fi
  for needed in $(readelf -d "$work/$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    case "$needed" in
      libc.so.6 | libm.so.6 | libpthread.so.0 | libdl.so.2 | librt.so.1 | ld-linux-x86-64.so.2) ;;
      libjax_accl_core.so) ;;
      *) fail "$lib needs $needed" ;;
    esac
  done
  echo "check_wheel.sh: $lib: GLIBC_$newest at most, needs $(readelf -d "$work/$lib" |
    sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
done
if [ -n "${ZIG_CC:-}" ]; then
  links="$work/link"
  mkdir -p "$links"
  find "$work/jax_accl" -name '*.so' -type f -exec cp {} "$links" \;
  nm -D --undefined-only "$links"/_accl*.so | awk '$2 ~ /^_?Py/ {print "char " $2 "[1];"}' \
    >"$links/python_api.c"
  echo 'int main(void) { return 0; }' >"$links/main.c"
  (cd "$links" && "$ZIG_CC" -shared -o libpython_api.so python_api.c &&
    "$ZIG_CC" main.c -o loads_every_library -L. -Wl,--no-as-needed \
      $(for lib in *.so; do [ "$lib" = libpython_api.so ] || echo "-l:$lib"; done) -lpython_api \
      -Wl,--no-allow-shlib-undefined) || fail "a library of the wheel does not link against glibc $GLIBC"
  echo "check_wheel.sh: every library links against glibc $GLIBC's (zig's $("$ZIG_CC" --version | head -n 1 | cut -c1-40))"
fi
echo "check_wheel.sh: $(basename "$wheel"): every library within glibc $GLIBC, no C++ runtime needed"
