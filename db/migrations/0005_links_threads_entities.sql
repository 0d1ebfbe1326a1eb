-- Multi-hop recall: links between memories, threads, and the entities each memory names.
--
-- Links are kept by external id, so a link to a memory not (yet) stored is kept and starts
-- working when that memory arrives; they never cross namespaces (one namespace column for
-- both ends). Deleting a memory deletes the links it made (its `links`), and its entities.

ALTER TABLE memories ADD COLUMN thread text;
CREATE INDEX idx_memories_thread ON memories (namespace, thread) WHERE thread IS NOT NULL;

CREATE TABLE memory_links (
    namespace     text NOT NULL,
    from_external text NOT NULL,
    to_external   text NOT NULL,
    label         text NOT NULL CHECK (label IN ('reply_to', 'same_topic', 'caused_by', 'continuation')),
    PRIMARY KEY (namespace, from_external, to_external, label)
);
-- The other direction: memories that link to a seed (the replies to a question).
CREATE INDEX idx_memory_links_to ON memory_links (namespace, to_external);

-- Entities normalised (NFKC, Latin lower-cased), one row per memory and entity.
CREATE TABLE memory_entities (
    namespace text   NOT NULL,
    entity    text   NOT NULL,
    memory_id bigint NOT NULL REFERENCES memories (id) ON DELETE CASCADE,
    -- How much sharing it says: a quoted name 1, a product or person name 0.8, a place 0.4.
    weight    real   NOT NULL DEFAULT 1,
    PRIMARY KEY (memory_id, entity)
);
-- Memories naming an entity, and the entity's document frequency (an index-only count).
CREATE INDEX idx_memory_entities_entity ON memory_entities (namespace, entity) INCLUDE (memory_id);

CREATE FUNCTION memory_links_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM memory_links l USING old_rows o
    WHERE l.namespace = o.namespace AND l.from_external = o.external_id;
    RETURN NULL;
END $$;

CREATE TRIGGER memories_links_delete AFTER DELETE ON memories
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION memory_links_after_delete();
