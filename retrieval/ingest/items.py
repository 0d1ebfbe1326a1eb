"""What a write carries into the core: one memory to store (`MemoryItem`, with its `Link`s), plain
data. The API and the JSONL reader validate what callers send (retrieval.ingest.memory_in) and hand
these on; a queued job stores them as JSON and reads them back (`to_json`, `from_json`)."""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from retrieval.errors import InvalidInput
from retrieval.validation import duplicate_ids

# How one memory relates to another (a link's label).
LINK_LABELS = ("reply_to", "same_topic", "caused_by", "continuation")


@dataclass(frozen=True)
class Link:
    """A link from a memory to another of the same namespace (stored or not yet)."""

    to: str
    label: str = "same_topic"


@dataclass(frozen=True)
class Event:
    """When what a memory tells happened, given by the caller: [start, end), aware instants;
    NO_EVENT (both None): the caller says it places nothing."""

    start: datetime | None
    end: datetime | None

    def to_json(self) -> dict[str, str] | None:
        if self.start is None or self.end is None:
            return None
        return {"start": self.start.isoformat(), "end": self.end.isoformat()}


NO_EVENT = Event(None, None)


@dataclass(frozen=True)
class MemoryItem:
    """One memory to store, validated; `entities` None: extracted from its text; `event_time`
    None: read from its words when written (retrieval.analysis.time.events), else the caller's
    (NO_EVENT: none)."""

    content: str
    id: str | None = None
    title: str | None = None
    created_at: datetime | None = None
    expires_at: datetime | None = None
    memory_type: str = "semantic"
    source_type: str = "unknown"
    metadata: dict[str, Any] = field(default_factory=dict)
    links: tuple[Link, ...] = ()
    thread: str | None = None
    entities: tuple[str, ...] | None = None
    event_time: Event | None = None

    def to_json(self) -> dict[str, Any]:
        """The item as JSON (instants in ISO 8601), without the fields it leaves unset."""
        out = {k: v for k, v in asdict(self).items() if v is not None}
        for k in ("created_at", "expires_at"):
            if k in out:
                out[k] = out[k].isoformat()
        out["links"] = [asdict(ln) for ln in self.links]
        if self.entities is not None:
            out["entities"] = list(self.entities)
        if self.event_time is not None:
            out["event_time"] = self.event_time.to_json()
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> MemoryItem:
        """An item written by to_json (or the packaged sample): trusted, validated before."""

        def instant(v: Any) -> datetime | None:
            return datetime.fromisoformat(v) if isinstance(v, str) else v

        return cls(
            content=d["content"],
            id=None if d.get("id") is None else str(d["id"]),
            title=d.get("title"),
            created_at=instant(d.get("created_at")),
            expires_at=instant(d.get("expires_at")),
            memory_type=d.get("memory_type", "semantic"),
            source_type=d.get("source_type", "unknown"),
            metadata=dict(d.get("metadata") or {}),
            links=tuple(Link(ln["to"], ln.get("label", "same_topic")) for ln in d.get("links", [])),
            thread=d.get("thread"),
            entities=None if d.get("entities") is None else tuple(d["entities"]),
            event_time=_event(d["event_time"]) if "event_time" in d else None,
        )

    def dated(self, at: datetime) -> MemoryItem:
        """The item with `at` as its time where it gave none."""
        return self if self.created_at is not None else replace(self, created_at=at)


def _event(v: dict[str, str] | None) -> Event:
    if v is None:
        return NO_EVENT
    return Event(datetime.fromisoformat(v["start"]), datetime.fromisoformat(v["end"]))


def json_lines(path: Path) -> Iterator[tuple[int, str]]:
    """The non-blank lines of a file (gzipped when its name ends in .gz), with their 1-based
    numbers (bytes that are not UTF-8 are kept, as surrogate escapes, for the line's parser to
    name, not raised at the first one)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="surrogateescape") as fh:
        for lineno, line in enumerate(fh, start=1):
            if line.strip():
                yield lineno, line


# One JSONL line (its text and 1-based number) as an item, or the errors naming its fields.
LineParser = Callable[[str, int], "MemoryItem | list[dict[str, object]]"]


def scan_jsonl(
    path: Path, parse: LineParser, *, keep: bool = True, max_errors: int | None = None
) -> tuple[list[MemoryItem], list[str | None]]:
    """Validate every line of a JSONL file with `parse`; raise InvalidInput naming each bad
    line (1-based, the first `max_errors` of them). Returns the items (unless `keep` is off: a large file's
    import reads them again chunk by chunk) and every item's id."""
    items: list[MemoryItem] = []
    ids: list[str | None] = []
    errors: list[dict[str, object]] = []
    lines: list[int] = []
    for lineno, line in json_lines(path):
        got = parse(line, lineno)
        if isinstance(got, list):
            errors.extend(got)
            if max_errors is not None and len(errors) >= max_errors:
                break
            continue
        ids.append(got.id)
        lines.append(lineno)
        if keep:
            items.append(got)
    errors.extend(duplicate_ids(ids, lines, key="line", noun="line"))
    if errors:
        raise InvalidInput(errors[:max_errors])
    return items, ids
