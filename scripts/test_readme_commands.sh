#!/usr/bin/env bash
# The README's two commands, `bash scripts/demo.sh` and `bash scripts/test.sh --fast`, in
# both orders and each order twice over, on fresh clones of this checkout's commit (what
# is committed, as a new user gets it), each clone with its own .venv made by the first
# command. Short runs: the demo 2 steps; the fast tests a few (-k), the style in full.
# A command that fails, or says nothing of what it installs, fails this script.
#   PYTHON=python3.12 bash scripts/test_readme_commands.sh      (a step of .ci/run)
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
commit="$(git rev-parse HEAD)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
unset VENV

run() {  # clone, command: runs it in the clone, checks what it printed
  local clone="$1" log="$work/log"
  shift
  echo "--- $(basename "$clone"): bash scripts/$*"
  local start=$SECONDS
  case "$1" in
    demo) (cd "$clone" && bash scripts/demo.sh --steps 2) >"$log" 2>&1 ;;
    test) (cd "$clone" && bash scripts/test.sh --fast -k "test_ffi_version or test_package_layout") \
      >"$log" 2>&1 ;;
  esac || { cat "$log"; echo "FAILED: bash scripts/$* in $clone"; return 1; }
  grep -Eq "^install.sh: (into .venv, what it is missing: |.venv has every requirement)" "$log" ||
    { cat "$log"; echo "FAILED: scripts/$* said nothing of what it installs"; return 1; }
  if [ "$1" = test ]; then
    grep -q "^lint: clean" "$log" && grep -Eq "[0-9]+ passed" "$log" ||
      { cat "$log"; echo "FAILED: no clean lint or passed tests"; return 1; }
  fi
  echo "    ok in $((SECONDS - start)) s: $(grep -E 'passed|accuracy|creating' "$log" | tr '\n' ' ')"
}

for order in "demo test" "test demo"; do
  clone="$work/clone-${order// /-then-}"
  git clone --quiet --no-checkout "$repo" "$clone"
  git -C "$clone" checkout --quiet "$commit"
  for command in $order $order; do run "$clone" "$command"; done
done
echo "the README's commands: both orders, twice each, passed"
