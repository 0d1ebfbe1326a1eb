"""What a write carries, validated by field: one memory (`MemoryIn`, with its links) from an API
body or a JSONL file (each bad line named by its number), handed to the core as a MemoryItem
(retrieval.ingest.items)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from retrieval.errors import InvalidInput
from retrieval.ingest.items import NO_EVENT, Event, Link, MemoryItem, scan_jsonl
from retrieval.validation import (
    check_id,
    check_instant,
    check_metadata,
    check_text,
    duplicate_ids,
)


def _instant_text(value: Any) -> Any:
    """An instant comes as ISO 8601 text: a number is not read as seconds since 1970."""
    if isinstance(value, (int, float)):
        raise ValueError("must be ISO 8601 text with a UTC offset, e.g. 2025-01-31T09:00:00+09:00")
    return value


# The request rules (retrieval.validation) as pydantic field types.
SafeStr = Annotated[str, AfterValidator(check_text)]
SafeId = Annotated[str, AfterValidator(check_id)]
Instant = Annotated[datetime, BeforeValidator(_instant_text), AfterValidator(check_instant)]
Metadata = Annotated[dict[str, Any], AfterValidator(check_metadata)]

MAX_CONTENT_CHARS = 100_000
MAX_ID_CHARS = 512


class LinkIn(BaseModel):
    """A link from this memory to another of the same namespace (stored or not yet)."""

    model_config = ConfigDict(extra="forbid")

    to: SafeId = Field(min_length=1, max_length=MAX_ID_CHARS)
    label: Literal["reply_to", "same_topic", "caused_by", "continuation"] = "same_topic"


class EventIn(BaseModel):
    """When what a memory tells happened, as the caller states it: [start, end), each ISO 8601
    with a UTC offset (end exclusive: a whole day is its midnight to the next)."""

    model_config = ConfigDict(extra="forbid")

    start: Instant
    end: Instant

    @field_validator("end")
    @classmethod
    def _after_start(cls, v: datetime, info: ValidationInfo) -> datetime:
        start = info.data.get("start")
        if start is not None and v <= start:
            raise ValueError("must be after start (the range is [start, end))")
        return v


class MemoryIn(BaseModel):
    """One memory to store; `text` is accepted as another name for `content`."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)

    id: SafeId | None = Field(default=None, min_length=1, max_length=MAX_ID_CHARS)
    content: SafeStr = Field(min_length=1, max_length=MAX_CONTENT_CHARS)
    title: SafeStr | None = Field(default=None, max_length=1000)
    created_at: Instant | None = None
    expires_at: Instant | None = None
    memory_type: SafeStr = Field(default="semantic", min_length=1, max_length=64)
    source_type: SafeStr = Field(default="unknown", min_length=1, max_length=64)
    metadata: Metadata = Field(default_factory=dict)
    links: list[LinkIn] = Field(default_factory=list, max_length=100)
    thread: SafeStr | None = Field(default=None, min_length=1, max_length=256)
    # Names this memory is about; extracted from its text when not given.
    entities: list[Annotated[SafeStr, Field(min_length=1, max_length=200)]] | None = Field(
        default=None, max_length=50
    )
    # When what it tells happened; left out, it is read from its words (null: it places none).
    event_time: EventIn | None = None

    @model_validator(mode="before")
    @classmethod
    def _text_alias(cls, data: Any) -> Any:
        if isinstance(data, dict) and "text" in data:
            data = dict(data)
            text = data.pop("text")
            if "content" in data:
                raise ValueError("give either content or text, not both")
            data["content"] = text
        if isinstance(data, dict):
            # Unknown top-level keys (a corpus's `source`, say) are kept, in metadata.
            extra = {k: data[k] for k in data if k not in cls.model_fields}
            if extra:
                data = {k: v for k, v in data.items() if k not in extra}
                meta = data.get("metadata") or {}
                if isinstance(meta, dict):
                    data["metadata"] = {**extra, **meta}
        return data

    @field_validator("id", mode="before")
    @classmethod
    def _id_str(cls, v: Any) -> Any:
        return str(v) if isinstance(v, int) and not isinstance(v, bool) else v

    @field_validator("content")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be empty or whitespace")
        return v

    @field_validator("expires_at")
    @classmethod
    def _expires_later(cls, v: datetime | None, info: ValidationInfo) -> datetime | None:
        """A memory that expires before it is written, or before it was made, would be stored
        and never found."""
        if v is None:
            return v
        if v <= datetime.now(UTC):
            raise ValueError("must be in the future")
        created = info.data.get("created_at")
        if created is not None and v <= created:
            raise ValueError("must be after created_at")
        return v

    @field_validator("links")
    @classmethod
    def _not_to_itself(cls, v: list[LinkIn], info: ValidationInfo) -> list[LinkIn]:
        own = info.data.get("id")
        if own is not None and any(ln.to == own for ln in v):
            raise ValueError("a memory cannot link to itself")
        return v

    def item(self) -> MemoryItem:
        """The validated memory as the core takes it."""
        return MemoryItem(
            content=self.content,
            id=self.id,
            title=self.title,
            created_at=self.created_at,
            expires_at=self.expires_at,
            memory_type=self.memory_type,
            source_type=self.source_type,
            metadata=self.metadata,
            links=tuple(Link(ln.to, str(ln.label)) for ln in self.links),
            thread=self.thread,
            entities=None if self.entities is None else tuple(self.entities),
            event_time=self._event(),
        )

    def _event(self) -> Event | None:
        """The caller's event (NO_EVENT for an explicit null), or None: read from the words."""
        if "event_time" not in self.model_fields_set:
            return None
        if self.event_time is None:
            return NO_EVENT
        return Event(self.event_time.start, self.event_time.end)


def _errors_of(exc: ValidationError, **where: int) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for e in exc.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(item)"
        out.append({**where, "field": loc, "reason": e["msg"]})
    return out


def parse_items(raw: Iterable[Any]) -> list[MemoryItem]:
    """Validate API items; raise InvalidInput naming every bad item index and field."""
    items: list[MemoryItem] = []
    errors: list[dict[str, object]] = []
    for i, obj in enumerate(raw):
        try:
            items.append(MemoryIn.model_validate(obj).item())
        except ValidationError as exc:
            errors.extend(_errors_of(exc, index=i))
    errors.extend(
        duplicate_ids([it.id for it in items], range(len(items)), key="index", noun="index")
    )
    if errors:
        raise InvalidInput(errors)
    return items


# Bytes that are not UTF-8, as `surrogateescape` decodes them (U+DC80-U+DCFF): decoded UTF-8
# text never holds a lone surrogate, so these can only come from such bytes.
_UNDECODABLE_RE = re.compile("[\udc80-\udcff]")


def parse_line(line: str, lineno: int) -> MemoryItem | list[dict[str, object]]:
    """One JSONL line as a memory, or the errors that name its line and field."""
    if bad := _UNDECODABLE_RE.search(line):
        reason = f"not UTF-8 (character {bad.start() + 1} of the line)"
        return [{"line": lineno, "field": "(encoding)", "reason": reason}]
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        return [{"line": lineno, "field": "(json)", "reason": f"invalid JSON: {exc.msg}"}]
    if not isinstance(obj, dict):
        return [{"line": lineno, "field": "(json)", "reason": "each line must be a JSON object"}]
    try:
        return MemoryIn.model_validate(obj).item()
    except ValidationError as exc:
        return _errors_of(exc, line=lineno)


def scan_file(
    path: Path, *, keep: bool = True, max_errors: int | None = None
) -> tuple[list[MemoryItem], list[str | None]]:
    """Validate every line of a JSONL file (retrieval.ingest.items.scan_jsonl with this
    module's parse_line)."""
    return scan_jsonl(path, parse_line, keep=keep, max_errors=max_errors)
