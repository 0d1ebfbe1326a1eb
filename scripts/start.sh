#!/usr/bin/env bash
# README command 1: install, start the embedded PostgreSQL, load the sample, serve on :8000.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/retrieval serve --sample --host "${HOST:-127.0.0.1}" --port "${PORT:-8000}"
