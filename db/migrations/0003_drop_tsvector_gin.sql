-- The keyword leg reads `postings` (0002); nothing searches content_tsvector any more. The
-- generated column stays: ingest takes each memory's lexemes from it (what term_df counts).
DROP INDEX IF EXISTS idx_memories_content_tsvector;
