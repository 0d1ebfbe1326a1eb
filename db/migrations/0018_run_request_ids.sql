-- Each run-log entry carries the id of the request that asked it (X-Request-ID, given or made):
-- the same id as the answer's header and the request's log line.
ALTER TABLE retrieval_runs ADD COLUMN request_id text;
