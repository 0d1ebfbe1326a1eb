-- BM25 statistics owned by the database: term_df and namespace_stats follow every write of
-- `memories` through statement-level triggers, beside the postings triggers of 0002.
--
-- Before this, ingest computed the deltas in Python from a snapshot read outside its write
-- transaction: two writers of the same ids counted the same change twice, and a batch naming
-- one id twice counted it twice, for ever. Here the deltas come from the rows each statement
-- really inserted, updated or deleted (transition tables), in the writer's own transaction.
-- Rows of term_df and namespace_stats are upserted in (namespace, term) order, so two
-- statements never lock them in opposite orders; ingest also serialises writers of one
-- namespace with an advisory lock (an INSERT ... ON CONFLICT fires the insert and the update
-- trigger one after the other, and those two lock sets together are not in one order).
--
-- doc_count counts every stored memory of a namespace (archived ones too, as before);
-- term_df counts the memories whose term_tf holds the term, which is what postings hold.

-- Each function adds the statement's deltas: per namespace (documents, tokens), then per term.
CREATE FUNCTION bm25_stats_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO namespace_stats AS s (namespace, doc_count, total_tokens)
    SELECT n.namespace, count(*), sum(n.token_count) FROM new_rows n
    GROUP BY n.namespace ORDER BY n.namespace
    ON CONFLICT (namespace) DO UPDATE SET doc_count = s.doc_count + EXCLUDED.doc_count,
                                         total_tokens = s.total_tokens + EXCLUDED.total_tokens;
    INSERT INTO term_df AS d (namespace, term, df)
    SELECT n.namespace, t.term, count(*)
    FROM new_rows n CROSS JOIN LATERAL jsonb_object_keys(n.term_tf) AS t(term)
    GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (namespace, term) DO UPDATE SET df = d.df + EXCLUDED.df;
    RETURN NULL;
END $$;

CREATE FUNCTION bm25_stats_after_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Only rows whose statistics can differ: archiving, feedback and metadata edits cost nothing.
    INSERT INTO namespace_stats AS s (namespace, doc_count, total_tokens)
    SELECT x.ns, sum(x.docs), sum(x.tokens) FROM (
        SELECT o.namespace AS ns, -1 AS docs, -o.token_count AS tokens
        FROM old_rows o JOIN new_rows n ON n.id = o.id
        WHERE o.token_count IS DISTINCT FROM n.token_count OR o.namespace IS DISTINCT FROM n.namespace
        UNION ALL
        SELECT n.namespace, 1, n.token_count
        FROM old_rows o JOIN new_rows n ON n.id = o.id
        WHERE o.token_count IS DISTINCT FROM n.token_count OR o.namespace IS DISTINCT FROM n.namespace
    ) AS x
    GROUP BY x.ns HAVING sum(x.docs) <> 0 OR sum(x.tokens) <> 0 ORDER BY x.ns
    ON CONFLICT (namespace) DO UPDATE SET doc_count = s.doc_count + EXCLUDED.doc_count,
                                         total_tokens = s.total_tokens + EXCLUDED.total_tokens;
    INSERT INTO term_df AS d (namespace, term, df)
    SELECT x.ns, x.term, sum(x.df) FROM (
        SELECT o.namespace AS ns, t.term, -1 AS df
        FROM old_rows o JOIN new_rows n ON n.id = o.id
        CROSS JOIN LATERAL jsonb_object_keys(o.term_tf) AS t(term)
        WHERE o.term_tf IS DISTINCT FROM n.term_tf OR o.namespace IS DISTINCT FROM n.namespace
        UNION ALL
        SELECT n.namespace, t.term, 1
        FROM old_rows o JOIN new_rows n ON n.id = o.id
        CROSS JOIN LATERAL jsonb_object_keys(n.term_tf) AS t(term)
        WHERE o.term_tf IS DISTINCT FROM n.term_tf OR o.namespace IS DISTINCT FROM n.namespace
    ) AS x
    GROUP BY x.ns, x.term HAVING sum(x.df) <> 0 ORDER BY x.ns, x.term
    ON CONFLICT (namespace, term) DO UPDATE SET df = d.df + EXCLUDED.df;
    RETURN NULL;
END $$;

CREATE FUNCTION bm25_stats_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO namespace_stats AS s (namespace, doc_count, total_tokens)
    SELECT o.namespace, -count(*), -sum(o.token_count) FROM old_rows o
    GROUP BY o.namespace ORDER BY o.namespace
    ON CONFLICT (namespace) DO UPDATE SET doc_count = s.doc_count + EXCLUDED.doc_count,
                                         total_tokens = s.total_tokens + EXCLUDED.total_tokens;
    INSERT INTO term_df AS d (namespace, term, df)
    SELECT o.namespace, t.term, -count(*)
    FROM old_rows o CROSS JOIN LATERAL jsonb_object_keys(o.term_tf) AS t(term)
    GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (namespace, term) DO UPDATE SET df = d.df + EXCLUDED.df;
    RETURN NULL;
END $$;

CREATE TRIGGER memories_bm25_insert AFTER INSERT ON memories
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION bm25_stats_after_insert();
CREATE TRIGGER memories_bm25_update AFTER UPDATE ON memories
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION bm25_stats_after_update();
CREATE TRIGGER memories_bm25_delete AFTER DELETE ON memories
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION bm25_stats_after_delete();

-- Statistics written by earlier versions may have drifted (duplicate ids in a batch, two
-- writers at once): recount them from the rows.
DELETE FROM term_df;
INSERT INTO term_df (namespace, term, df)
SELECT m.namespace, t.term, count(*) FROM memories m
CROSS JOIN LATERAL jsonb_object_keys(m.term_tf) AS t(term) GROUP BY 1, 2;
UPDATE namespace_stats s SET doc_count = 0, total_tokens = 0;
INSERT INTO namespace_stats AS s (namespace, doc_count, total_tokens)
SELECT namespace, count(*), sum(token_count) FROM memories GROUP BY namespace
ON CONFLICT (namespace) DO UPDATE SET doc_count = EXCLUDED.doc_count, total_tokens = EXCLUDED.total_tokens;

-- The harness's bookkeeping (which corpus or synthetic set `retrieval eval` / `retrieval bench`
-- indexed into a namespace) leaves the service's statistics table for a table of its own: eval
-- only ever replaces a namespace listed here (or one it is told to take with --force).
CREATE TABLE harness_indexes (
    namespace  text PRIMARY KEY,
    cache_key  text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO harness_indexes (namespace, cache_key)
SELECT namespace, cache_key FROM namespace_stats WHERE cache_key IS NOT NULL;
ALTER TABLE namespace_stats DROP COLUMN cache_key;

-- Retention (RETRIEVAL_RUN_RETENTION_DAYS) deletes feedback by age, as it does runs.
CREATE INDEX idx_feedback_created ON feedback (created_at);
