#!/usr/bin/env bash
# Run the locust load headless against a local service for a fixed time; print p50/p95/p99 and
# errors. Usage: scripts/load_test.sh [HOST] [USERS] [SECONDS] [USER CLASSES...]
#   HOST defaults to http://127.0.0.1:8000 (this machine only), USERS to 8, SECONDS to 30;
#   user classes of scripts/locustfile.py (default: every one).
set -euo pipefail
cd "$(dirname "$0")/.."
HOST="${1:-http://127.0.0.1:8000}"
USERS="${2:-8}"
SECONDS_="${3:-30}"
shift $(( $# < 3 ? $# : 3 ))
case "$HOST" in
  http://127.*|http://localhost*|http://\[::1\]*) ;;
  *) echo "refusing to load-test $HOST: only local services" >&2; exit 2 ;;
esac
OUT="$(mktemp -d)"
.venv/bin/locust -f scripts/locustfile.py --host "$HOST" --headless -u "$USERS" -r "$USERS" \
  -t "${SECONDS_}s" --csv "$OUT/load" --only-summary "$@" >/dev/null 2>"$OUT/locust.log" || true
.venv/bin/python - "$OUT/load_stats.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
print(f"{'name':28s} {'reqs':>6s} {'fails':>6s} {'rps':>7s} {'p50':>6s} {'p95':>6s} {'p99':>6s}  (ms)")
for r in rows:
    print(f"{r['Name'][:28]:28s} {r['Request Count']:>6s} {r['Failure Count']:>6s} {float(r['Requests/s']):7.1f} "
          f"{r['50%']:>6s} {r['95%']:>6s} {r['99%']:>6s}")
for r in csv.DictReader(open(sys.argv[1].replace("_stats.csv", "_failures.csv"))):
    print(f"failed {r['Occurrences']:>5s} x {r['Name']}: {r['Error']}")
PY
