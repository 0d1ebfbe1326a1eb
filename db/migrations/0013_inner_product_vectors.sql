-- The vector legs rank by inner product (issue #22): a conversation turn's stored vector is the
-- mean of its own e5 vector and its vector after the turn it follows (retrieval/turn_context.py),
-- so its inner product with a query is the mean of the two cosines. Every other vector is of
-- unit length, where the inner product is the cosine: their scores and order do not change.
-- Cosine graphs would rank the mean by its normalised direction, which measured worse
-- (locomo_dev recall@10 .554 against .618 for the mean).
DROP INDEX idx_memories_embedding_hnsw;
CREATE INDEX idx_memories_embedding_hnsw ON memories USING hnsw (embedding vector_ip_ops);

SET LOCAL maintenance_work_mem = '1GB';
DROP INDEX idx_memory_vectors_hnsw;
CREATE INDEX idx_memory_vectors_hnsw ON memory_vectors
    USING hnsw (embedding vector_ip_ops) WITH (m = 32, ef_construction = 128);
