#!/bin/sh
# Makes the secrets the manifests reference, once: an existing secret is never overwritten.
#   sh deploy/kube/make-secrets.sh with-postgres      the in-cluster example database: a random
#                                                     password for it (the service reads it as
#                                                     PGPASSWORD; its DATABASE_URL has none)
#   DATABASE_URL=postgresql://… sh deploy/kube/make-secrets.sh external
# Both make a random API key (printed once: give it to the context assembler).
set -eu
mode="${1:-}"
have() { kubectl get secret "$1" >/dev/null 2>&1; }
random() { od -An -N24 -tx1 /dev/urandom | tr -d ' \n'; }
if have retrieval-secrets; then
  echo "retrieval-secrets exists: kept as it is"
  exit 0
fi
key="$(random)"
url=""
case "$mode" in
  with-postgres)
    if have retrieval-postgres; then
      echo "retrieval-postgres exists: kept as it is (the database's password)"
    else
      kubectl create secret generic retrieval-postgres --from-literal=POSTGRES_PASSWORD="$(random)"
    fi
    ;;
  external)
    url="${DATABASE_URL:?set DATABASE_URL to your PostgreSQL}"
    ;;
  *)
    echo "usage: make-secrets.sh with-postgres|external" >&2
    exit 2
    ;;
esac
if [ -n "$url" ]; then
  kubectl create secret generic retrieval-secrets \
    --from-literal=DATABASE_URL="$url" --from-literal=RETRIEVAL_API_KEYS="${key}:*"
else
  kubectl create secret generic retrieval-secrets --from-literal=RETRIEVAL_API_KEYS="${key}:*"
fi
echo "API key (every namespace): ${key}"
