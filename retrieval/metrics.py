"""Prometheus metrics, defined once. Labels are bounded: strategy, source, status, route."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, multiprocess

# prometheus-client's multiprocess mode: every worker writes its samples to files in this
# directory and any worker's /metrics sums them. Read when prometheus_client is imported, so
# `retrieval serve --workers N` sets it before the workers start.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

# A service whose p95 target is tens of milliseconds: resolution where it matters.
LATENCY_BUCKETS_MS = (
    1,
    2.5,
    5,
    7.5,
    10,
    15,
    20,
    30,
    40,
    50,
    75,
    100,
    150,
    250,
    500,
    1000,
    2500,
    5000,
)
COUNT_BUCKETS = (0, 1, 2, 5, 10, 20, 50, 100, 200)

RETRIEVAL_LATENCY = Histogram(
    "retrieval_latency_ms",
    "End-to-end retrieve() latency in ms, by strategy",
    ["strategy"],
    buckets=LATENCY_BUCKETS_MS,
)
STRATEGY_USAGE = Counter(
    "retrieval_strategy_usage_total", "Retrievals by strategy used", ["strategy"]
)
EMPTY_RESULTS = Counter(
    "retrieval_empty_results_total", "Retrievals that returned no result", ["strategy"]
)
UNANSWERED = Counter(
    "retrieval_unanswered_total",
    "Retrievals whose first result's confidence is below the threshold (nothing answers)",
    ["strategy"],
)
# The stages measured on their own (the histogram's `stage` label).
STAGES = ("analyze", "embed", "expand", "confidence")
STAGE_LATENCY = Histogram(
    "retrieval_stage_latency_ms",
    "Latency of pipeline stages in ms (analyze, embed, expand, confidence)",
    ["stage"],
    buckets=LATENCY_BUCKETS_MS,
)
SEARCH_LATENCY = Histogram(
    "retrieval_search_latency_ms",
    "Latency of one search source in ms",
    ["source"],
    buckets=LATENCY_BUCKETS_MS,
)
SOURCE_TIMEOUTS = Counter(
    "retrieval_source_timeouts_total", "Searches that hit their timeout", ["source"]
)
SOURCE_ERRORS = Counter("retrieval_source_errors_total", "Searches that failed", ["source"])
DEGRADED = Counter(
    "retrieval_degraded_total", "Retrievals answered without one or more sources", ["strategy"]
)
RERANK_LATENCY = Histogram(
    "retrieval_rerank_latency_ms", "Rerank latency in ms", buckets=LATENCY_BUCKETS_MS
)
RESULTS_BEFORE = Histogram(
    "retrieval_results_before_rerank", "Distinct candidates before reranking", buckets=COUNT_BUCKETS
)
RESULTS_AFTER = Histogram(
    "retrieval_results_after_rerank", "Results returned after reranking", buckets=COUNT_BUCKETS
)
INGESTED = Counter(
    "retrieval_ingested_memories_total", "Memories written (inserted or updated)", ["op"]
)
INGEST_JOBS = Counter(
    "retrieval_ingest_jobs_total",
    "Write jobs (batches too big to embed inline): queued, done, retried, failed",
    ["event"],
)
TENANT_WAIT = Histogram(
    "retrieval_tenant_wait_seconds",
    "How long retrievals waited for their namespace's share of processing time (only those "
    "that waited; no namespace label: tenants' names stay out of the metrics)",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0),
)
TENANT_REFUSED = Counter(
    "retrieval_tenant_refused_total",
    "Retrievals refused (429) because their namespace would have waited longer than "
    "RETRIEVAL_TENANT_MAX_WAIT_S for its share of processing time",
)
INGEST_ERRORS = Counter("retrieval_ingest_rejected_total", "Ingest batches rejected as invalid")
UNAVAILABLE = Counter(
    "retrieval_unavailable_total", "Retrievals answered 503 because no search source answered"
)
RUN_LOG_DROPPED = Counter(
    "retrieval_run_log_dropped_total", "Run-log records not written (database slow or failing)"
)
RETENTION_DELETED = Counter(
    "retrieval_retention_deleted_total", "Run-log and feedback rows deleted by retention", ["table"]
)
FEEDBACK = Counter("retrieval_feedback_total", "Feedback events", ["kind"])
ERASED = Counter(
    "retrieval_erased_memories_total",
    "Memories erased, by how: erase (by id), purge (a namespace), expired (past expires_at)",
    ["how"],
)
HTTP_REQUESTS = Counter(
    "retrieval_http_requests_total", "HTTP requests", ["route", "method", "status"]
)
HTTP_LATENCY = Histogram(
    "retrieval_http_request_latency_ms",
    "HTTP request latency in ms",
    ["route", "method"],
    buckets=LATENCY_BUCKETS_MS,
)

# The write-job queue as the job worker last read it (every poll): jobs waiting, and how long
# the oldest has waited. Every worker reads the same queue: the largest live value counts.
JOBS_QUEUED = Gauge(
    "retrieval_ingest_jobs_queued",
    "Write jobs waiting to be written",
    multiprocess_mode="livemax",
)
JOB_OLDEST_S = Gauge(
    "retrieval_ingest_job_oldest_seconds",
    "How long the oldest waiting write job has waited (0: none waits)",
    multiprocess_mode="livemax",
)
# What this process's /readyz last answered (1 ready, 0 not): its changes show flapping.
READY = Gauge(
    "retrieval_ready",
    "1 when /readyz last answered ready, 0 when it did not",
    multiprocess_mode="livemin",
)

DB_QUERIES = Counter("retrieval_db_queries_total", "Search legs run, by where they ran", ["target"])
# With several workers each checks every replica: the worst value of the live workers counts.
REPLICA_LAG = Gauge(
    "retrieval_replica_lag_seconds",
    "Replay lag of a read replica (0 when caught up)",
    ["replica"],
    multiprocess_mode="livemax",
)
REPLICA_HEALTHY = Gauge(
    "retrieval_replica_healthy",
    "1 when the replica serves reads, 0 when skipped",
    ["replica"],
    multiprocess_mode="livemin",
)


def record_retrieval(meta: Any) -> None:
    """Every metric of one answered retrieve (a RetrievalMetadata), in one place."""
    strategy = meta.strategy_used.value
    for stage in STAGES:
        if stage in meta.stage_latency_ms:
            STAGE_LATENCY.labels(stage).observe(meta.stage_latency_ms[stage])
    if "rerank" in meta.stage_latency_ms:
        RERANK_LATENCY.observe(meta.stage_latency_ms["rerank"])
    RETRIEVAL_LATENCY.labels(strategy).observe(meta.total_latency_ms)
    STRATEGY_USAGE.labels(strategy).inc()
    RESULTS_BEFORE.observe(meta.num_results_before_rerank)
    RESULTS_AFTER.observe(meta.num_results_after_rerank)
    if not meta.num_results_after_rerank:
        EMPTY_RESULTS.labels(strategy).inc()
    if meta.degraded:
        DEGRADED.labels(strategy).inc()
    if meta.answered is not None and not meta.answered.answered:
        UNANSWERED.labels(strategy).inc()


def init_series(strategies: list[str], sources: list[str]) -> None:
    """Create every bounded label combination at zero, so dashboards show 0, not "no data"."""
    for s in strategies:
        RETRIEVAL_LATENCY.labels(s)
        STRATEGY_USAGE.labels(s)
        EMPTY_RESULTS.labels(s)
        DEGRADED.labels(s)
        UNANSWERED.labels(s)
    for src in sources:
        SEARCH_LATENCY.labels(src)
        SOURCE_TIMEOUTS.labels(src)
        SOURCE_ERRORS.labels(src)
    for stage in STAGES:
        STAGE_LATENCY.labels(stage)
    for op in ("insert", "update"):
        INGESTED.labels(op)
    for event in ("queued", "done", "retried", "failed"):
        INGEST_JOBS.labels(event)
    for kind in ("negative", "positive"):
        FEEDBACK.labels(kind)
    for table in ("retrieval_runs", "feedback", "ingest_jobs"):
        RETENTION_DELETED.labels(table)
    for target in ("primary", "replica"):
        DB_QUERIES.labels(target)


def exposition_registry() -> CollectorRegistry:
    """The registry /metrics exposes: this process's own, or (several workers) the sum over
    every worker's files."""
    if not os.environ.get(MULTIPROC_ENV):
        return REGISTRY
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return registry


def prepare_multiprocess_dir(path: Path) -> Path:
    """A directory for one start of the service, without an earlier start's sample files
    (they would be summed into this one's counters). Only those files are removed: the
    directory may be one an operator chose."""
    path.mkdir(parents=True, exist_ok=True)
    for f in path.glob("*.db"):
        f.unlink()
    return path


def worker_exit(pid: int) -> None:
    """Forget a stopped worker's live gauges (counters and histograms keep their totals)."""
    if os.environ.get(MULTIPROC_ENV):
        multiprocess.mark_process_dead(pid)


class StageClock:
    """Milliseconds per stage of one request or write (`stage_ms`: a stage timed twice adds
    up), and the CPU seconds of the stages it ran itself (`timed`, on the calling thread:
    other requests' work on the machine is not counted)."""

    def __init__(self) -> None:
        self.stage_ms: dict[str, float] = {}
        self.cpu_s = 0.0
        self._since = time.perf_counter()

    def add(self, stage: str, ms: float) -> None:
        self.stage_ms[stage] = self.stage_ms.get(stage, 0.0) + ms

    def mark(self) -> None:
        """The next lap starts now (what ran since was timed on its own)."""
        self._since = time.perf_counter()

    def lap(self, stage: str) -> None:
        """The time since the last lap (or the clock's start) goes to `stage`."""
        now = time.perf_counter()
        self.add(stage, (now - self._since) * 1000.0)
        self._since = now

    def timed(self, stage: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """fn(*args, **kwargs), its time going to `stage` and its CPU time to `cpu_s`."""
        s, c = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            self.add(stage, (time.perf_counter() - s) * 1000.0)
            self.cpu_s += time.thread_time() - c
            self._since = time.perf_counter()

    def seconds(self) -> dict[str, float]:
        """Each stage's time in seconds."""
        return {k: v / 1000.0 for k, v in self.stage_ms.items()}
