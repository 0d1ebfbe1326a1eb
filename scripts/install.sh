#!/usr/bin/env bash
# Create .venv and install the project (and, with --dev, the test tools) into it.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
if [ "${1:-}" = "--dev" ]; then
  .venv/bin/python -m pip install -q -e '.[dev]'
else
  .venv/bin/python -m pip install -q -e .
fi
# The wheel's pgvector needs AVX-512; rebuild it portably where the CPU lacks it.
bash scripts/ensure_pgvector.sh .venv/bin/python
