"""What the evaluation harness (eval, bench) indexed into a namespace: a key per corpus, so that
a namespace indexed once is reused, and one it did not make is never overwritten."""

from __future__ import annotations

# Returns the cache key the harness (eval, bench) recorded for a namespace (NULL = not its own).
GET_HARNESS_KEY = "SELECT cache_key FROM harness_indexes WHERE namespace = $1"
# Records which corpus or synthetic set the harness indexed into a namespace.
PUT_HARNESS_KEY = """
INSERT INTO harness_indexes (namespace, cache_key) VALUES ($1, $2)
ON CONFLICT (namespace) DO UPDATE SET cache_key = EXCLUDED.cache_key, created_at = now()"""
# Returns whether a namespace holds any memory.
HAS_MEMORIES = "SELECT EXISTS (SELECT 1 FROM memories WHERE namespace = $1)"
