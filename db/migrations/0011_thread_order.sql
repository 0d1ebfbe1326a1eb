-- A thread in time order: the turns around a result (retrieval/context.py) and a seed's thread
-- nearest in time first (retrieval/sources.py THREAD_SQL) read it from the index instead of
-- sorting the whole thread. It serves every lookup the (namespace, thread) index did.
CREATE INDEX idx_memories_thread_time ON memories (namespace, thread, created_at, id)
  WHERE thread IS NOT NULL;
DROP INDEX idx_memories_thread;
