-- Postings and entities leave with their memory through the statement trigger that already
-- keeps the BM25 statistics on delete, not through foreign keys: a key's per-row check cost
-- 37 us per posting on every write (31 of 43 s when 13,433 passages wrote their 837,829
-- postings, measured), more than the postings themselves. Postings are only written by the
-- memories' own triggers (0002), and entities by the writer of the memory in the same
-- transaction under the namespace's lock, from the ids that write returned.

ALTER TABLE postings DROP CONSTRAINT IF EXISTS postings_memory_id_fkey;
ALTER TABLE memory_entities DROP CONSTRAINT IF EXISTS memory_entities_memory_id_fkey;

CREATE OR REPLACE FUNCTION bm25_stats_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM postings p USING old_rows o WHERE p.memory_id = o.id;
    DELETE FROM memory_entities e USING old_rows o WHERE e.memory_id = o.id;
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

-- Rows whose memory is already gone (none, while the keys held) would only cost space.
DELETE FROM postings p WHERE NOT EXISTS (SELECT 1 FROM memories m WHERE m.id = p.memory_id);
DELETE FROM memory_entities e WHERE NOT EXISTS (SELECT 1 FROM memories m WHERE m.id = e.memory_id);
