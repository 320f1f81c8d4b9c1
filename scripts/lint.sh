#!/usr/bin/env bash
# The style checks of the test command (fail on any violation): ruff (lint and format,
# configured in pyproject.toml) for Python, clang-format (.clang-format) for xla_ffi/.
# Both are pinned in the "lint" and "test" extras. To fix what they report:
#   ruff format . && ruff check --fix . && clang-format -i $(git ls-files 'xla_ffi/*.cc' 'xla_ffi/*.h' 'xla_ffi/*.inc')
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${VENV:-.venv}/bin"
"$bin/ruff" check --no-cache .
"$bin/ruff" format --no-cache --check .
find xla_ffi \( -name '*.cc' -o -name '*.h' -o -name '*.inc' \) -print0 |
  xargs -0 "$bin/clang-format" --dry-run --Werror
echo "lint: clean (ruff check, ruff format, clang-format)"
