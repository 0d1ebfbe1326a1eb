#!/usr/bin/env bash
# deploy/constraints.txt: the versions pip's resolver picks today for the image's install
# (the light client and the service, without extras), written as pins; nothing is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
report="$(mktemp)" log="$(mktemp)"
trap 'rm -f "$report" "$log"' EXIT
if ! .venv/bin/python -m pip install --dry-run --ignore-installed --quiet --report "$report" \
  ./clients/python . >"$log" 2>&1; then
  cat "$log" >&2
  exit 1
fi
.venv/bin/python - "$report" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
own = {"retrieval-orchestrator", "retrieval-client"}
pins = sorted(
    (i["metadata"]["name"].lower(), i["metadata"]["version"])
    for i in report["install"] if i["metadata"]["name"].lower() not in own
)
head = (
    "# The versions the image installs (pip install --constraint): two builds of one commit get\n"
    "# the same packages. Made by scripts/make_constraints.sh (pip's own resolver, nothing\n"
    "# installed); remade when pyproject.toml's dependencies change.\n"
)
open("deploy/constraints.txt", "w").write(head + "".join(f"{n}=={v}\n" for n, v in pins))
print(f"deploy/constraints.txt: {len(pins)} pins")
PY
