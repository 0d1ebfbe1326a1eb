-- A small window (at most EXACT_WINDOW_MAX memories, retrieval/sources.py) is searched exactly.
-- Over `memories` that meant reading every vector of the window out of TOAST (the rows are wide):
-- 33 ms for the 4,757 memories of 昨日 at 1M. The weekly copies in `memory_vectors` keep their
-- vectors inline; this index finds a window's rows there: 8 ms for the same, same results.
CREATE INDEX idx_memory_vectors_namespace_created ON memory_vectors (namespace, created_at);
