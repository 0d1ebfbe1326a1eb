-- Purges of a whole namespace (POST /v1/namespaces/{ns}/purge): a job with progress, resumed by
-- whichever process of the service finds it unfinished (its owner gone), idempotent (a purge of a
-- namespace already being purged is the same job). Erasing leaves no row that names or quotes an
-- erased memory (docs/runbook.md, "What erasing leaves").
CREATE TABLE purges (
    id          uuid PRIMARY KEY,
    namespace   text        NOT NULL,
    tenant      text        NOT NULL,
    state       text        NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'done', 'failed')),
    total       bigint      NOT NULL DEFAULT 0,
    erased      bigint      NOT NULL DEFAULT 0,
    vacuumed    boolean     NOT NULL DEFAULT false,
    owner       text,
    lease_until timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    error       text
);
-- At most one unfinished purge per namespace: a second request finds the first.
CREATE UNIQUE INDEX idx_purges_running ON purges (namespace) WHERE state = 'running';
-- Listing pages through a namespace by id; the runs that returned a memory are found by id.
CREATE INDEX idx_retrieval_runs_namespace ON retrieval_runs (namespace, created_at);
CREATE INDEX idx_feedback_namespace ON feedback (namespace, external_id);
-- Memories past their expiry are erased hourly (the retention pass), found by this index.
CREATE INDEX idx_memories_expires ON memories (expires_at) WHERE expires_at IS NOT NULL;
