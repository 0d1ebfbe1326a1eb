-- Memory store, BM25 statistics, retrieval run log and feedback.
-- {{embedding_dim}} is replaced by the configured embedding dimension when first applied.
CREATE EXTENSION IF NOT EXISTS vector;
-- pg_trgm serves the trigram (names) leg only: a server without it (some managed services)
-- still gets the store, and the service reports that leg as unavailable.
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm') THEN
    CREATE EXTENSION IF NOT EXISTS pg_trgm;
  ELSE
    RAISE WARNING 'pg_trgm is not available on this server: the trigram (names) search leg is off';
  END IF;
END $$;

CREATE TABLE IF NOT EXISTS store_meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);

CREATE TABLE memories (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    external_id      text        NOT NULL,
    namespace        text        NOT NULL,
    content          text        NOT NULL,
    title            text,
    memory_type      text        NOT NULL DEFAULT 'semantic',
    source_type      text        NOT NULL DEFAULT 'unknown',
    metadata         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    embedding        vector({{embedding_dim}}) NOT NULL,
    -- Sudachi normalized forms of content words (English lower-cased), space separated:
    -- made in the application because PostgreSQL has no Japanese text-search configuration.
    search_tokens    text        NOT NULL,
    token_count      integer     NOT NULL,
    -- {lexeme: term frequency} of content_tsvector, for BM25 without unnesting the tsvector.
    term_tf          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    content_tsvector tsvector GENERATED ALWAYS AS (to_tsvector('simple', search_tokens)) STORED,
    created_at       timestamptz NOT NULL DEFAULT now(),
    ingested_at      timestamptz NOT NULL DEFAULT now(),
    expires_at       timestamptz,
    is_archived      boolean     NOT NULL DEFAULT false,
    searchable       boolean     NOT NULL DEFAULT true,
    CONSTRAINT memories_namespace_external_id UNIQUE (namespace, external_id)
);

CREATE INDEX idx_memories_content_tsvector ON memories USING gin (content_tsvector);
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') THEN
    CREATE INDEX idx_memories_content_trgm ON memories USING gin (content gin_trgm_ops);
  END IF;
END $$;
CREATE INDEX idx_memories_embedding_hnsw ON memories USING hnsw (embedding vector_cosine_ops);
CREATE INDEX idx_memories_namespace_created ON memories (namespace, created_at);

-- Document frequency per token and namespace, kept at ingest: ts_rank has no IDF, BM25 needs it.
CREATE TABLE term_df (
    namespace text    NOT NULL,
    term      text    NOT NULL,
    df        integer NOT NULL,
    PRIMARY KEY (namespace, term)
);

CREATE TABLE namespace_stats (
    namespace    text   PRIMARY KEY,
    doc_count    bigint NOT NULL DEFAULT 0,
    total_tokens bigint NOT NULL DEFAULT 0,
    cache_key    text
);

CREATE TABLE retrieval_runs (
    run_id         uuid        PRIMARY KEY,
    namespace      text        NOT NULL,
    query          text        NOT NULL,
    strategy       text        NOT NULL,
    plan           jsonb       NOT NULL,
    candidate_ids  text[]      NOT NULL,
    selected_ids   text[]      NOT NULL,
    latencies      jsonb       NOT NULL,
    degraded       text[]      NOT NULL DEFAULT '{}',
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX idx_retrieval_runs_created ON retrieval_runs (created_at);

CREATE TABLE feedback (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id      uuid,
    namespace   text        NOT NULL,
    external_id text        NOT NULL,
    negative    boolean     NOT NULL,
    comment     text,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- OR of many tsqueries, so a query's terms can be combined without building tsquery text.
CREATE AGGREGATE tsquery_or_agg(tsquery) (SFUNC = tsquery_or, STYPE = tsquery);
