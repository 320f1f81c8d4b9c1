#!/usr/bin/env bash
# Makes docs/profile-trace-viewer.png, the README's screenshot of xprof's trace viewer with
# jax_accl's rows: profiles a jitted jax_accl psum over 8 host devices (4 MiB each, 5 calls),
# serves the profile with xprof, and has headless Chromium (driven by playwright-python)
# open the trace viewer, frame one call and screenshot it at 1600x900.
# Needs root for `apt-get install chromium` (skipped when /usr/bin/chromium exists); installs
# playwright into a scratch venv under /tmp, nothing into the project's venv. Re-runnable.
# Usage: bash scripts/profile_screenshot.sh [OUT.png]   (VENV: jax_accl's venv, default .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
out="$(realpath -m "${1:-docs/profile-trace-viewer.png}")"
venv_python="$(realpath "${VENV:-.venv}")/bin/python"
script="$repo/scripts/profile_screenshot.py"
work="${WORK:-/tmp/jax_accl_profile_screenshot}"

command -v chromium >/dev/null || { apt-get update && apt-get install -y chromium; }
export CHROMIUM="${CHROMIUM:-$(command -v chromium)}"
[ -x "$work/venv/bin/python" ] || python3 -m venv "$work/venv"
"$work/venv/bin/python" -c "import playwright" 2>/dev/null ||
  "$work/venv/bin/pip" install -q playwright pillow

# Capture (from outside the checkout: importing jax_accl from the source tree fails).
rm -rf "$work/logdir"
(cd /tmp && "$venv_python" "$script" capture "$work/logdir")

# Serve it on free ports; stop the server on exit.
read -r port grpc_port < <("$venv_python" -c '
import socket
ss = [socket.socket() for _ in range(2)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')
(cd /tmp && exec "$(dirname "$venv_python")/xprof" server --logdir "$work/logdir" \
  --port "$port" --grpc_port "$grpc_port") >"$work/xprof.log" 2>&1 &
xprof_pid=$!
trap 'kill "$xprof_pid" 2>/dev/null || true' EXIT
for _ in $(seq 60); do
  curl -sf "http://localhost:$port/data/plugin/profile/runs" >/dev/null && break
  sleep 1
done

(cd /tmp && "$work/venv/bin/python" "$script" shot "http://localhost:$port" "$out")
