-- BM25 postings: one row per (memory, lexeme), read by the keyword leg in impact order.
--
-- Scoring a query by looking up term_tf in every matched memory cost ~20 us a row: at 1M
-- memories a common term matched ~45,000 of them (300 ms). With postings ordered by impact the
-- leg reads, per query term, at most a fixed number of its best postings (a "champion list",
-- Manning et al., IR ch. 7.1.3): rare terms are read whole, so their BM25 is exact; a common term
-- contributes only where it weighs most, which is where it can change the ranking.
--
-- `impact` is the BM25 term-frequency part (k1 = 1.2, b = 0.75) with the namespace's average
-- length when the posting was written: it only orders a term's postings. Scores are computed
-- at query time from tf and dl with the current average length.
CREATE TABLE postings (
    namespace text    NOT NULL,
    term      text    NOT NULL,
    memory_id bigint  NOT NULL REFERENCES memories (id) ON DELETE CASCADE,
    tf        integer NOT NULL,
    dl        integer NOT NULL,
    impact    real    NOT NULL
    -- PRIMARY KEY (memory_id, term) and the impact index: added after the fill below.
);

-- Replaces the postings of the given memories from their term_tf (memories rows must exist).
-- Without namespace statistics yet (a first batch), the batch's own average length is used.
CREATE FUNCTION write_postings(ids bigint[]) RETURNS void LANGUAGE sql AS $$
    DELETE FROM postings WHERE memory_id = ANY (ids);
    INSERT INTO postings (namespace, term, memory_id, tf, dl, impact)
    SELECT m.namespace, t.key, m.id, t.value::integer, m.token_count,
           t.value::float8 / (t.value::float8 + 1.2 * (0.25 + 0.75 * m.token_count / a.avgdl))
    FROM memories m
    JOIN (SELECT b.namespace,
                 greatest(coalesce(max(s.total_tokens::float8 / nullif(s.doc_count, 0)), avg(b.token_count)), 1) AS avgdl
          FROM memories b LEFT JOIN namespace_stats s ON s.namespace = b.namespace
          WHERE b.id = ANY (ids) GROUP BY b.namespace) a ON a.namespace = m.namespace
    CROSS JOIN LATERAL jsonb_each_text(m.term_tf) AS t
    WHERE m.id = ANY (ids);
$$;

-- Statement-level triggers with transition tables: a bulk insert writes its postings in one
-- statement, and every write path (ingest, API, bulk loads) keeps them in step with term_tf.
CREATE FUNCTION postings_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM write_postings(ARRAY(SELECT id FROM new_rows));
    RETURN NULL;
END $$;

CREATE FUNCTION postings_after_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM write_postings(ARRAY(
        SELECT n.id FROM new_rows n JOIN old_rows o ON o.id = n.id
        WHERE o.term_tf IS DISTINCT FROM n.term_tf OR o.token_count IS DISTINCT FROM n.token_count
           OR o.namespace IS DISTINCT FROM n.namespace));
    RETURN NULL;
END $$;

CREATE TRIGGER memories_postings_insert AFTER INSERT ON memories
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION postings_after_insert();
CREATE TRIGGER memories_postings_update AFTER UPDATE ON memories
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION postings_after_update();

-- Existing memories (the indexes are built after the fill: faster than maintaining them).
SELECT write_postings(ARRAY(SELECT id FROM memories));
ALTER TABLE postings ADD PRIMARY KEY (memory_id, term);
-- A term's postings in impact order, with everything BM25 needs (index-only scans).
CREATE INDEX idx_postings_term_impact ON postings (namespace, term, impact DESC) INCLUDE (memory_id, tf, dl);
