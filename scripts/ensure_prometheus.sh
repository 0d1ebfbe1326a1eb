#!/usr/bin/env bash
# The dashboard test scrapes the service with a real Prometheus (Debian's package).
set -euo pipefail
if command -v prometheus >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null
  command -v prometheus >/dev/null
else
  echo "prometheus not installed and no root: the dashboard test will be skipped" >&2
  exit 1
fi
