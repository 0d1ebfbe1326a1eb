-- Passages of long memories (issue #25): a memory whose content is longer than its one vector
-- sees (retrieval/passages/split.py, SPLIT_ABOVE) is cut into passages on sentence boundaries,
-- each with its own vector; the vector leg scores a memory by its best passage (max-sim) and
-- returns that passage's offsets, the highlight's first candidate. Short memories have no row
-- here: their vector, score and speed are what they were.
CREATE TABLE memory_passages (
    memory_id  bigint  NOT NULL REFERENCES memories (id) ON DELETE CASCADE,
    ord        integer NOT NULL,
    namespace  text    NOT NULL,
    -- [start_char, end_char) of the memory's content.
    start_char integer NOT NULL,
    end_char   integer NOT NULL,
    embedding  vector({{embedding_dim}}) NOT NULL,
    PRIMARY KEY (memory_id, ord),
    CHECK (0 <= start_char AND start_char < end_char)
);
-- The namespace's passages, for its exact search (few) and its count.
CREATE INDEX idx_memory_passages_namespace ON memory_passages (namespace);
CREATE INDEX idx_memory_passages_hnsw ON memory_passages USING hnsw (embedding vector_ip_ops);

-- A bulk import stages the passages of the memories it embeds (db/bulk.py) and publishes them
-- with its rows; `passages_given` marks a staged row whose passages replace the stored ones (its
-- text changed), false: keep them.
CREATE UNLOGGED TABLE import_passages (
    import_id  text    NOT NULL REFERENCES imports (import_id) ON DELETE CASCADE,
    seq        integer NOT NULL,
    ord        integer NOT NULL,
    start_char integer NOT NULL,
    end_char   integer NOT NULL,
    embedding  vector  NOT NULL,
    PRIMARY KEY (import_id, seq, ord)
);
ALTER TABLE import_rows ADD COLUMN passages_given boolean NOT NULL DEFAULT false;
