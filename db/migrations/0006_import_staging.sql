-- Bulk import (`retrieval ingest` of a file): rows are staged here, chunk by chunk, each chunk
-- committed, so an interrupted import resumes where it stopped; nothing is visible in
-- `memories` until one transaction publishes the whole import and deletes its staged rows.
-- Unlogged: staging is rebuilt from the file if the server crashes, and costs no WAL.

CREATE UNLOGGED TABLE imports (
    import_id  text PRIMARY KEY,
    namespace  text NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now()
);

CREATE UNLOGGED TABLE import_rows (
    import_id      text    NOT NULL REFERENCES imports (import_id) ON DELETE CASCADE,
    seq            integer NOT NULL,  -- the item's line in the file
    external_id    text    NOT NULL,
    content        text    NOT NULL,
    title          text,
    memory_type    text    NOT NULL,
    source_type    text    NOT NULL,
    metadata       jsonb   NOT NULL,
    embedding      vector  NOT NULL,
    search_tokens  text    NOT NULL,
    token_count    integer NOT NULL,
    created_at     timestamptz,
    expires_at     timestamptz,
    thread         text,
    entities       text[]  NOT NULL,
    entity_weights real[]  NOT NULL,
    links          jsonb   NOT NULL,  -- [[to, label], ...]
    PRIMARY KEY (import_id, seq)
);
