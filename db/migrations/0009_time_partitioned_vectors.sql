-- The temporal leg's own copy of every live memory's vector, range-partitioned by created_at
-- into calendar weeks, each week with its own HNSW graph (issue #12, part 3).
--
-- Before this, a window was searched by walking the one HNSW graph of the whole store and
-- filtering by time: at 1M memories a 7-day window holds ~5 % of the graph, the walk visited
-- 20x the rows it kept (temporal leg p50 65 / p95 120 ms), and it missed the window's best
-- match in about a quarter of the queries. A week's graph searched whole finds it in ~4 ms
-- (docs/scaling.md, "Time partitions"). `memories` keeps its primary key, its global graph
-- (the vector leg) and every write path: this table follows it through statement triggers,
-- in the writer's transaction, so a reader never sees one without the other.
--
-- Weeks start on Monday 00:00 in the store's week timezone (store_meta 'vector_week_timezone',
-- the service's RETRIEVAL_TIMEZONE when this migration first ran), so 先週 is one partition.
-- Weeks from five years back to one year ahead of the write get a partition
-- (memory_vectors_ensure); anything else (year 1, 3000年前, a typo of 9999) lands in the
-- default partition, which is searched as before: filtered by time over its own graph.
-- That bounds the partitions at ~320 whatever a client sends.

INSERT INTO store_meta (key, value) VALUES ('vector_week_timezone', {{timezone}})
ON CONFLICT (key) DO NOTHING;

CREATE TABLE memory_vectors (
    memory_id   bigint      NOT NULL,
    namespace   text        NOT NULL,
    created_at  timestamptz NOT NULL,
    memory_type text        NOT NULL,
    source_type text        NOT NULL,
    expires_at  timestamptz,
    embedding   vector({{embedding_dim}}) NOT NULL
) PARTITION BY RANGE (created_at);
CREATE TABLE memory_vectors_other PARTITION OF memory_vectors DEFAULT;

-- One row per weekly partition: [lo, hi) and its table.
CREATE TABLE memory_vector_weeks (
    lo      timestamptz PRIMARY KEY,
    hi      timestamptz NOT NULL,
    relname text        NOT NULL UNIQUE
);

-- Makes sure a weekly partition exists for each of the given instants that lies within the
-- horizon; returns how many were made. Rows of a new week that wait in the default partition
-- move into it. Writers call it in a short transaction of its own before they write: attaching
-- takes the default partition's ACCESS EXCLUSIVE lock until commit. Making a week waits at most
-- 3 s for its locks; past that it gives up on the weeks left (a warning says so), and the rows
-- of those weeks land in the default partition, where they are still found, until a later call
-- makes their week. The caller's own lock_timeout is left as it was.
CREATE FUNCTION memory_vectors_ensure(stamps timestamptz[]) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    tz   text := (SELECT value FROM store_meta WHERE key = 'vector_week_timezone');
    wait text := current_setting('lock_timeout');
    w    timestamptz;
    nxt  timestamptz;
    rel  text;
    made integer := 0;
BEGIN
    FOR w IN
        SELECT DISTINCT date_trunc('week', s AT TIME ZONE tz) AT TIME ZONE tz
        FROM unnest(stamps) AS s
        WHERE s >= now() - interval '5 years' AND s < now() + interval '1 year'
    LOOP
        CONTINUE WHEN EXISTS (SELECT 1 FROM memory_vector_weeks WHERE lo = w);
        BEGIN
            PERFORM set_config('lock_timeout', '3s', true);
            -- Two writers that meet the same new week: the second waits here and finds it made.
            PERFORM pg_advisory_xact_lock(hashtext('memory_vector_weeks'));
            nxt := ((w AT TIME ZONE tz) + interval '7 days') AT TIME ZONE tz;
            -- A week that overlaps one made under another timezone keeps its rows in the default.
            IF NOT EXISTS (SELECT 1 FROM memory_vector_weeks WHERE lo < nxt AND hi > w) THEN
                rel := 'memory_vectors_w' || to_char(w AT TIME ZONE 'UTC', 'YYYYMMDD"t"HH24MI');
                EXECUTE format('CREATE TABLE %I (LIKE memory_vectors)', rel);
                EXECUTE format(
                    'WITH moved AS (DELETE FROM memory_vectors_other '
                    'WHERE created_at >= $1 AND created_at < $2 RETURNING *) '
                    'INSERT INTO %I SELECT * FROM moved', rel) USING w, nxt;
                -- Bounds are instants this function computed, not client text.
                EXECUTE format(
                    'ALTER TABLE memory_vectors ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                    rel, w, nxt);
                INSERT INTO memory_vector_weeks (lo, hi, relname) VALUES (w, nxt, rel);
                made := made + 1;
            END IF;
        EXCEPTION WHEN lock_not_available THEN
            -- This week's half-made work (and the 3 s timeout) is rolled back with the block.
            RAISE WARNING 'vector partitions busy: the week of % waits in memory_vectors_other', w;
            RETURN made;
        END;
        PERFORM set_config('lock_timeout', wait, true);
    END LOOP;
    RETURN made;
END $$;

-- A live memory (not archived, searchable) has exactly one row here, in its week.
CREATE FUNCTION memory_vectors_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO memory_vectors (memory_id, namespace, created_at, memory_type, source_type,
                                expires_at, embedding)
    SELECT n.id, n.namespace, n.created_at, n.memory_type, n.source_type, n.expires_at, n.embedding
    FROM new_rows n WHERE NOT n.is_archived AND n.searchable;
    RETURN NULL;
END $$;

CREATE FUNCTION memory_vectors_after_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Only rows whose copy can differ: a title or metadata edit costs nothing here.
    WITH changed AS (
        SELECT o.id, o.created_at AS old_created FROM old_rows o JOIN new_rows n ON n.id = o.id
        WHERE (o.embedding, o.created_at, o.namespace, o.memory_type, o.source_type, o.expires_at,
               o.is_archived, o.searchable)
              IS DISTINCT FROM
              (n.embedding, n.created_at, n.namespace, n.memory_type, n.source_type, n.expires_at,
               n.is_archived, n.searchable)),
    gone AS (
        DELETE FROM memory_vectors v USING changed c
        WHERE v.memory_id = c.id AND v.created_at = c.old_created)
    INSERT INTO memory_vectors (memory_id, namespace, created_at, memory_type, source_type,
                                expires_at, embedding)
    SELECT n.id, n.namespace, n.created_at, n.memory_type, n.source_type, n.expires_at, n.embedding
    FROM new_rows n JOIN changed c ON c.id = n.id
    WHERE NOT n.is_archived AND n.searchable;
    RETURN NULL;
END $$;

CREATE FUNCTION memory_vectors_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM memory_vectors v USING old_rows o
    WHERE v.memory_id = o.id AND v.created_at = o.created_at;
    RETURN NULL;
END $$;

CREATE TRIGGER memories_vectors_insert AFTER INSERT ON memories
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION memory_vectors_after_insert();
CREATE TRIGGER memories_vectors_update AFTER UPDATE ON memories
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION memory_vectors_after_update();
CREATE TRIGGER memories_vectors_delete AFTER DELETE ON memories
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION memory_vectors_after_delete();

-- The memories already stored: their weeks first, then the rows, then the graphs (a graph
-- built once over its rows is several times faster than one grown row by row).
SELECT memory_vectors_ensure(array(
    SELECT created_at FROM memories WHERE NOT is_archived AND searchable));
INSERT INTO memory_vectors (memory_id, namespace, created_at, memory_type, source_type,
                            expires_at, embedding)
SELECT id, namespace, created_at, memory_type, source_type, expires_at, embedding
FROM memories WHERE NOT is_archived AND searchable;

SET LOCAL maintenance_work_mem = '1GB';
-- m = 32, ef_construction = 128: on a week of 55k near-duplicate bench memories the default
-- (16, 64) graph found the best match for 0.83-0.90 of the queries, this one for all 30
-- (docs/scaling.md). Each week's graph is small, so the denser build stays cheap.
CREATE INDEX idx_memory_vectors_hnsw ON memory_vectors
    USING hnsw (embedding vector_cosine_ops) WITH (m = 32, ef_construction = 128);
CREATE INDEX idx_memory_vectors_memory ON memory_vectors (memory_id);
ANALYZE memory_vectors;
