#!/usr/bin/env bash
# README command 2 (and CI): install everything, then run the whole test suite with coverage.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --dev
bash scripts/ensure_prometheus.sh || true
.venv/bin/ruff check retrieval db tests scripts clients
.venv/bin/ruff format --check retrieval db tests scripts clients
.venv/bin/mypy
.venv/bin/python -m pytest "$@"
