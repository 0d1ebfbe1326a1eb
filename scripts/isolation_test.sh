#!/usr/bin/env bash
# Does one tenant's cost reach the others? Runs the ordinary users (scripts/locustfile.py
# ContextAssembler) alone, then again beside one HeavyTenant user in a locust process of its
# own (so the ordinary users' figures are theirs alone), ROUNDS times (default 2), and prints
# the ordinary users' req/s, p50/p95/p99 and failures (degraded answers count as failures)
# for each run, with the heavy user's.
# Usage: scripts/isolation_test.sh [HOST] [USERS] [SECONDS]
#   HOST: http://127.0.0.1:8000 by default (this machine only); USERS 6, SECONDS 40.
#   The namespace `heavy` must hold memories. RETRIEVAL_LOAD_WAIT_S sets the ordinary users'
#   pause (see the locustfile); the default here is 0.2-0.4 s, about half of what this service
#   answers on 2 cores with six users.
set -euo pipefail
cd "$(dirname "$0")/.."
HOST="${1:-http://127.0.0.1:8000}"
USERS="${2:-6}"
SECONDS_="${3:-40}"
ROUNDS="${ROUNDS:-2}"
export RETRIEVAL_LOAD_WAIT_S="${RETRIEVAL_LOAD_WAIT_S:-0.2-0.4}"
case "$HOST" in
  http://127.*|http://localhost*|http://\[::1\]*) ;;
  *) echo "refusing to load-test $HOST: only local services" >&2; exit 2 ;;
esac
OUT="$(mktemp -d)"
run() {  # NAME USERS CLASS
  .venv/bin/locust -f scripts/locustfile.py --host "$HOST" --headless -u "$2" -r "$2" \
    -t "${SECONDS_}s" --csv "$OUT/$1" --only-summary "$3" >/dev/null 2>"$OUT/$1.log" || true
}
for round in $(seq "$ROUNDS"); do
  run "alone$round" "$USERS" ContextAssembler
  sleep 5
  run "heavy$round" 1 HeavyTenant &
  run "beside$round" "$USERS" ContextAssembler
  wait
  sleep 5
done
.venv/bin/python - "$OUT" "$ROUNDS" <<'PY'
import csv, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def agg(name):
    rows = list(csv.DictReader(open(f"{out}/{name}_stats.csv")))
    return next(r for r in rows if r["Name"] == "Aggregated")
print(f"{'run':22s} {'reqs':>6s} {'fails':>6s} {'rps':>6s} {'p50':>5s} {'p95':>5s} {'p99':>5s}  (ms)")
for i in range(1, rounds + 1):
    for label, name in (("ordinary alone", f"alone{i}"), ("ordinary beside heavy", f"beside{i}"),
                        ("heavy", f"heavy{i}")):
        r = agg(name)
        print(f"{label:22s} {r['Request Count']:>6s} {r['Failure Count']:>6s} "
              f"{float(r['Requests/s']):6.1f} {r['50%']:>5s} {r['95%']:>5s} {r['99%']:>5s}")
    for name in (f"beside{i}", f"heavy{i}"):
        for r in csv.DictReader(open(f"{out}/{name}_failures.csv")):
            print(f"  {name}: failed {r['Occurrences']} x {r['Name']}: {r['Error']}")
PY
