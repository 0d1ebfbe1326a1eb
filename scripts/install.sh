#!/usr/bin/env bash
# Create .venv and install the project (and, with --dev, the test tools) into it.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT
pip_install() {
  # pip is chatty here (mirror warnings); show its output only when it fails.
  if ! .venv/bin/python -m pip install --disable-pip-version-check "$@" >"$LOG" 2>&1; then
    cat "$LOG" >&2
    echo "install failed: pip install $*" >&2
    exit 1
  fi
}
pip_install --upgrade pip
# The light client is its own distribution, which the service depends on: both from here.
if [ "${1:-}" = "--dev" ]; then
  pip_install -e ./clients/python -e '.[dev]'
else
  pip_install -e ./clients/python -e '.[embedded]'
fi
echo "installed into .venv" >&2
