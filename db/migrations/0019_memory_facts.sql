-- The changing attribute each memory states, and whose (retrieval.analysis.facts: "residence",
-- "car:mother"), read when it is written: '' when it states none, NULL when a memory written
-- before this migration has not been read yet (`retrieval retokenize` reads it; until then the
-- reranker reads the text). Two memories of one namespace with one key are one fact stated at
-- two times: the newer supersedes the older (GET /v1/memories/{id} says by which).
ALTER TABLE memories ADD COLUMN fact text;
ALTER TABLE import_rows ADD COLUMN fact text;
CREATE INDEX idx_memories_fact ON memories (namespace, fact, created_at DESC)
    WHERE fact IS NOT NULL AND fact <> '';
