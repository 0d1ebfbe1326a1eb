-- Write jobs belong to a tenant (the API key that queued them, or the namespace when no keys are
-- configured): the open-job bound and the order jobs are served in are per tenant, so a key that
-- names a new namespace for every batch is still one tenant. Jobs queued before are their
-- namespace's.
ALTER TABLE ingest_jobs ADD COLUMN tenant text;
UPDATE ingest_jobs SET tenant = 'ns:' || namespace WHERE tenant IS NULL;
ALTER TABLE ingest_jobs ALTER COLUMN tenant SET NOT NULL;
CREATE INDEX idx_ingest_jobs_tenant ON ingest_jobs (tenant, started_at);
