-- The names leg's trigram index is keyed by an expression of the namespace (namespace || ''),
-- which its statement names and no btree index serves. With the column itself (0016), a store
-- holding one namespace had the planner read the (namespace, created_at) btree and match the
-- pattern against every memory of it: the GIN index's namespace key matched every row, so its
-- estimate was seven times the btree's. On the long-memory set (909 articles, one namespace)
-- that was 700-900 ms a question, the leg's deadline, against 15 ms through this index; a
-- store of many namespaces got the GIN index and never showed it. The lookup still reads only
-- its own namespace's matches. A server without btree_gin keeps the index on content alone.
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm')
     OR NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'btree_gin') THEN
    RETURN;
  END IF;
  PERFORM set_config('maintenance_work_mem', '256MB', true);
  DROP INDEX IF EXISTS idx_memories_content_trgm;
  CREATE INDEX idx_memories_content_trgm ON memories
      USING gin ((namespace || ''), content gin_trgm_ops);
END $$;
