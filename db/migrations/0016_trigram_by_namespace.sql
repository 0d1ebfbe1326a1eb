-- The names leg's trigram index holds the namespace too (btree_gin), so that a lookup reads only
-- its own namespace's matches. With content alone, the index's bitmap held every namespace's
-- memories sharing the name's trigrams, and each was read and matched against the pattern before
-- the namespace filtered it out: "Rachel" in a 500-turn chat rechecked 433 long turns of other
-- namespaces, 21 ms, against 1 ms by namespace (docs/benchmarks.md). Another tenant's store no
-- longer costs a lookup anything. The index keeps its name (the bulk import rebuilds it from its
-- own definition; the service checks it by name). A server without btree_gin keeps the old one.
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') THEN
    RETURN;
  END IF;
  IF EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'btree_gin') THEN
    CREATE EXTENSION IF NOT EXISTS btree_gin;
    PERFORM set_config('maintenance_work_mem', '256MB', true);
    DROP INDEX IF EXISTS idx_memories_content_trgm;
    CREATE INDEX idx_memories_content_trgm ON memories USING gin (namespace, content gin_trgm_ops);
  ELSE
    RAISE WARNING 'btree_gin is not available on this server: the trigram index reads every namespace';
  END IF;
END $$;
