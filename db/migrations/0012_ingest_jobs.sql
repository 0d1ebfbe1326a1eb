-- Write jobs: a batch of memories accepted by POST /v1/memories that is more than can be
-- embedded inside one request (retrieval/ingest_jobs.py). The validated batch is stored here
-- before the 202 is sent, so an accepted batch survives a restart; a worker claims a job under
-- a lease (a dead worker's job is claimed again when its lease runs out), embeds it outside
-- any transaction and writes it in one, like an inline write. `items` is cleared once written.
CREATE TABLE ingest_jobs (
    id           uuid PRIMARY KEY,
    namespace    text NOT NULL,
    state        text NOT NULL DEFAULT 'queued'
                 CHECK (state IN ('queued', 'running', 'done', 'failed')),
    items        jsonb,
    received     integer NOT NULL,
    ids          text[] NOT NULL,
    estimate_s   real NOT NULL,
    attempts     integer NOT NULL DEFAULT 0,
    owner        text,
    lease_until  timestamptz,
    not_before   timestamptz NOT NULL DEFAULT now(),
    created_at   timestamptz NOT NULL DEFAULT now(),
    started_at   timestamptz,
    finished_at  timestamptz,
    report       jsonb,
    error        text
);
-- The queue: unfinished jobs in the order they came.
CREATE INDEX idx_ingest_jobs_open ON ingest_jobs (created_at) WHERE state IN ('queued', 'running');
CREATE INDEX idx_ingest_jobs_namespace ON ingest_jobs (namespace, created_at);
