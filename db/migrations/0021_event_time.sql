-- When what a memory tells happened (retrieval.analysis.time.events), beside when it was written:
-- `event_time` [start, end) (local midnights of the memory's own offset), NULL when its words
-- place nothing; `event_offset` the UTC offset in seconds it was read in (the listing shows the
-- range in it); `event_read` who placed it: the event reader's version (1, 2 ...), 0 the caller
-- (never read again), NULL a memory written before this migration, not read yet
-- (`retrieval read-events` reads them; until then it matches windows by created_at alone).
ALTER TABLE memories
    ADD COLUMN event_time tstzrange,
    ADD COLUMN event_offset integer,
    ADD COLUMN event_read smallint;
ALTER TABLE import_rows
    ADD COLUMN event_time tstzrange,
    ADD COLUMN event_offset integer,
    ADD COLUMN event_read smallint;
-- The temporal leg's second clock: the memories whose event overlaps a window (&&).
CREATE INDEX idx_memories_event_time ON memories USING gist (event_time)
    WHERE event_time IS NOT NULL;
-- What is not read yet (the rows written before this migration): the re-read finds them by it.
CREATE INDEX idx_memories_event_unread ON memories (id) WHERE event_read IS NULL;
