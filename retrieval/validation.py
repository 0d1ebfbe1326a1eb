"""The rules on what callers send, each written once and shared by every edge (HTTP schemas,
JSONL ingest, CLI options, the library).

- Hostile input: each check raises ValueError with a reason a caller can act on; pydantic turns
  it into a 422 naming the field (the API) or a `FILE:LINE: field: reason` message (the CLI).
  What passes can be stored and returned without an encoding error: PostgreSQL text holds no
  NUL, UTF-8 holds no lone surrogate, JSON holds no NaN or Infinity, and timestamptz holds no
  year-1 local time.
- A retrieval request's bounds (`check_request`): the query, limit, context window, budget,
  time zone and window, and the conversation's sizes, against the configured `RequestLimits`.
- A write's bounds (`check_batch`): how many memories, no id twice.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from retrieval.errors import InvalidInput
from retrieval.models import TIME_MAX, TIME_MIN, TimeRange, time_in_bounds

if TYPE_CHECKING:
    from retrieval.models import RetrievalOptions
    from retrieval.settings import Settings

_SURROGATE = re.compile("[\ud800-\udfff]")
# C0 controls other than tab, newline and carriage return, and DEL: never part of an id.
_ID_FORBIDDEN = re.compile("[\x00-\x1f\x7f/]")

# Deepest nesting of metadata objects and arrays, and its largest size as compact JSON.
METADATA_MAX_DEPTH = 8
METADATA_MAX_BYTES = 64 * 1024


# Unicode categories with nothing to see: controls, formats (zero-width spaces, joiners, marks
# of direction), separators, surrogates, unassigned.
_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Cn", "Zs", "Zl", "Zp"})


def visible(text: str) -> bool:
    """Whether a text holds a character that shows (a question of zero-width spaces does not)."""
    return any(unicodedata.category(c) not in _INVISIBLE for c in text)


def check_text(value: str) -> str:
    """Refuse NUL characters and lone surrogates (neither can be stored as PostgreSQL text)."""
    if "\x00" in value:
        raise ValueError("must not contain NUL (U+0000) characters")
    if _SURROGATE.search(value):
        raise ValueError("must not contain lone surrogates (U+D800-U+DFFF); send valid UTF-8")
    return value


def check_id(value: str) -> str:
    """An id that a URL path can address: no '/', no control characters, no lone surrogate,
    and not `.` or `..` (a path segment that URLs resolve away: stored, it could never be read
    or archived again)."""
    check_text(value)
    if _ID_FORBIDDEN.search(value):
        raise ValueError("must not contain '/' or control characters")
    if value in (".", ".."):
        raise ValueError("must not be '.' or '..' (no URL can address them)")
    if value != value.strip():
        raise ValueError("must not start or end with white space")
    return value


def check_instant(value: datetime | None) -> datetime | None:
    """An aware time between TIME_MIN and TIME_MAX (1900-2200)."""
    if value is None:
        return None
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("must be ISO 8601 with a UTC offset, e.g. 2025-01-31T09:00:00+09:00")
    if not time_in_bounds(value):
        raise ValueError(
            f"must lie between {TIME_MIN.date().isoformat()} and {TIME_MAX.date().isoformat()}"
        )
    return value


def _walk(value: Any, depth: int, path: str) -> None:
    if depth > METADATA_MAX_DEPTH:
        raise ValueError(f"nested deeper than {METADATA_MAX_DEPTH} levels at {path or 'top'}")
    if isinstance(value, str):
        try:
            check_text(value)
        except ValueError as exc:
            raise ValueError(f"{path or 'value'}: {exc}") from None
    elif isinstance(value, bool) or value is None or isinstance(value, int):
        return
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(
                f"{path or 'value'}: not a finite number (NaN, Infinity, or beyond a 64-bit "
                "float, such as 1e400)"
            )
    elif isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"{path or 'top'}: keys must be strings")
            try:
                check_text(k)
            except ValueError as exc:
                raise ValueError(f"key {k!r}: {exc}") from None
            _walk(v, depth + 1, f"{path}.{k}" if path else k)
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _walk(v, depth + 1, f"{path}[{i}]")
    else:
        raise ValueError(f"{path or 'value'}: {type(value).__name__} is not a JSON value")


def check_metadata(value: dict[str, Any]) -> dict[str, Any]:
    """JSON that PostgreSQL's jsonb accepts, at most METADATA_MAX_DEPTH deep and
    METADATA_MAX_BYTES long."""
    _walk(value, 1, "")
    size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    if size > METADATA_MAX_BYTES:
        raise ValueError(f"{size} bytes as JSON, more than {METADATA_MAX_BYTES}")
    return value


# A namespace (tenant): the one rule for the API, the CLI and the harness.
NAMESPACE_PATTERN = r"^[A-Za-z0-9_.:\-]+$"
MAX_NAMESPACE_CHARS = 128
_NAMESPACE_RE = re.compile(NAMESPACE_PATTERN)


def check_namespace(namespace: str) -> None:
    """Refuse a namespace that is empty, longer than 128 characters or outside [A-Za-z0-9_.:-]."""
    if not namespace or len(namespace) > MAX_NAMESPACE_CHARS or not _NAMESPACE_RE.match(namespace):
        raise InvalidInput(
            [{"field": "namespace", "reason": "must be 1-128 characters of A-Z a-z 0-9 _ . : -"}]
        )


def duplicate_ids(
    ids: Sequence[str | None], positions: Sequence[int], *, key: str, noun: str
) -> list[dict[str, object]]:
    """An error for each id seen before in the same batch or file, at its position (key
    "line" or "index"), naming where it first appeared ("line 3", "item 0")."""
    errors: list[dict[str, object]] = []
    seen: dict[str, int] = {}
    for x, pos in zip(ids, positions, strict=True):
        if x is None:
            continue
        if x in seen:
            reason = f"duplicate id {x!r} (first at {noun} {seen[x]})"
            errors.append({key: pos, "field": "id", "reason": reason})
        else:
            seen[x] = pos
    return errors


# The most memories on each side of a result a caller may ask for (options.context_window).
MAX_CONTEXT_WINDOW = 5
# The largest budget a request can name (a whole answer of 100 results of 100,000 characters).
MAX_BUDGET_CHARS = 10_000_000


@dataclass(frozen=True)
class RequestLimits:
    """The configured bounds of a request (RETRIEVAL_MAX_*; the OpenAPI document shows them)."""

    max_query_chars: int = 2000
    max_limit: int = 100
    max_conversation_messages: int = 50
    max_message_chars: int = 16_000
    max_conversation_chars: int = 16_000
    max_batch: int = 1000

    @classmethod
    def of(cls, settings: Settings) -> RequestLimits:
        return cls(
            max_query_chars=settings.max_query_chars,
            max_limit=settings.max_limit,
            max_conversation_messages=settings.max_conversation_messages,
            max_message_chars=settings.max_message_chars,
            max_conversation_chars=settings.max_conversation_chars,
            max_batch=settings.max_batch,
        )


def aware(value: datetime | None, zone: ZoneInfo) -> datetime | None:
    """A naive instant read in `zone` (a library caller's; the API takes only aware ones)."""
    return value if value is None or value.tzinfo else value.replace(tzinfo=zone)


def in_zone(tr: TimeRange | None, zone: ZoneInfo) -> TimeRange | None:
    """A caller's window with its naive ends read in `zone`."""
    if tr is None:
        return None
    return replace(tr, start=aware(tr.start, zone), end=aware(tr.end, zone))


def request_zone(timezone: str | None, default: ZoneInfo) -> ZoneInfo:
    """The calendar a request's time words are read in; ValueError for an unknown zone."""
    if timezone is None:
        return default
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise ValueError(f"unknown time zone {timezone!r}") from exc


def _between(errors: list[dict[str, object]], field: str, value: int, lo: int, hi: int) -> None:
    if not lo <= value <= hi:
        errors.append({"field": field, "reason": f"must be between {lo} and {hi}"})


def _conversation_errors(
    conversation: tuple[tuple[str, str], ...], limits: RequestLimits
) -> list[dict[str, object]]:
    errors: list[dict[str, object]] = []
    if len(conversation) > limits.max_conversation_messages:
        reason = f"more than {limits.max_conversation_messages} messages"
        errors.append({"field": "recent_conversation", "reason": reason})
    for i, (_, content) in enumerate(conversation):
        if len(content) > limits.max_message_chars:
            reason = f"longer than {limits.max_message_chars} characters"
            errors.append({"field": f"recent_conversation.{i}.content", "reason": reason})
    total = sum(len(content) for _, content in conversation)
    if total > limits.max_conversation_chars and not errors:
        reason = (
            f"{total} characters in all, more than {limits.max_conversation_chars}: send the "
            "last turns (the service reads the end of the last messages and every message's "
            "memory_id)"
        )
        errors.append({"field": "recent_conversation", "reason": reason})
    return errors


@dataclass(frozen=True)
class CheckedRequest:
    """A retrieval request that keeps every rule: the query stripped, the zone its time words
    are read in, and the options with their naive instants (`now`, `time_range`) read in it."""

    query: str
    zone: ZoneInfo
    options: RetrievalOptions


def check_request(
    query: str, options: RetrievalOptions, limits: RequestLimits, default_zone: ZoneInfo
) -> CheckedRequest:
    """Every rule of a retrieval request, for every caller (the API, MCP, the CLI, the library):
    InvalidInput naming each field that breaks one."""
    errors = _conversation_errors(options.recent_conversation, limits)
    q = query.strip() if isinstance(query, str) else ""
    if not visible(q):
        errors.append(
            {
                "field": "query",
                "reason": "must hold a visible character (not only spaces, zero-width or "
                "control characters)",
            }
        )
    elif len(q) > limits.max_query_chars:
        errors.append(
            {"field": "query", "reason": f"longer than {limits.max_query_chars} characters"}
        )
    _between(errors, "options.context_window", options.context_window, 0, MAX_CONTEXT_WINDOW)
    _between(errors, "options.limit", options.limit, 1, limits.max_limit)
    if options.max_chars is not None:
        _between(errors, "options.max_chars", options.max_chars, 1, MAX_BUDGET_CHARS)
    try:
        zone = request_zone(options.timezone, default_zone)
    except ValueError:
        errors.append({"field": "options.timezone", "reason": "not a known IANA time zone"})
        zone = default_zone
    tr = in_zone(options.time_range, zone)
    now = aware(options.now, zone)
    if tr and tr.start and tr.end and tr.start >= tr.end:
        errors.append({"field": "options.time_range", "reason": "start must be before end"})
    for name, value in (
        ("options.now", now),
        ("options.time_range.start", tr.start if tr else None),
        ("options.time_range.end", tr.end if tr else None),
    ):
        try:
            check_instant(value)
        except ValueError as exc:
            errors.append({"field": name, "reason": str(exc)})
    if errors:
        raise InvalidInput(errors)
    return CheckedRequest(q, zone, replace(options, now=now, time_range=tr))


def check_batch(ids: Sequence[str | None], max_batch: int | None) -> None:
    """A batch's bounds: at most `max_batch` memories (None: any number), no id twice."""
    errors: list[dict[str, object]] = []
    if max_batch is not None and len(ids) > max_batch:
        reason = f"more than {max_batch} memories in one batch"
        errors.append({"field": "memories", "reason": reason})
    errors.extend(duplicate_ids(ids, range(len(ids)), key="index", noun="item"))
    if errors:
        raise InvalidInput(errors)
