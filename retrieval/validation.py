"""Checks for hostile input, shared by every edge (HTTP schemas, JSONL ingest, CLI options).

Each check raises ValueError with a reason a caller can act on; pydantic turns it into a 422
naming the field (the API) or a `FILE:LINE: field: reason` message (the CLI). What passes can
be stored and returned without an encoding error: PostgreSQL text holds no NUL, UTF-8 holds no
lone surrogate, JSON holds no NaN or Infinity, and timestamptz holds no year-1 local time.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator

from retrieval.errors import InvalidInput
from retrieval.models import TIME_MAX, TIME_MIN, time_in_bounds

_SURROGATE = re.compile("[\ud800-\udfff]")
# C0 controls other than tab, newline and carriage return, and DEL: never part of an id.
_ID_FORBIDDEN = re.compile("[\x00-\x1f\x7f/]")

# Deepest nesting of metadata objects and arrays, and its largest size as compact JSON.
METADATA_MAX_DEPTH = 8
METADATA_MAX_BYTES = 64 * 1024


def check_text(value: str) -> str:
    """Refuse NUL characters and lone surrogates (neither can be stored as PostgreSQL text)."""
    if "\x00" in value:
        raise ValueError("must not contain NUL (U+0000) characters")
    if _SURROGATE.search(value):
        raise ValueError("must not contain lone surrogates (U+D800-U+DFFF); send valid UTF-8")
    return value


def check_id(value: str) -> str:
    """An id that a URL path can address: no '/', no control characters, no lone surrogate."""
    check_text(value)
    if _ID_FORBIDDEN.search(value):
        raise ValueError("must not contain '/' or control characters")
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
            raise ValueError(f"{path or 'value'}: NaN and Infinity are not JSON numbers")
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


SafeStr = Annotated[str, AfterValidator(check_text)]
SafeId = Annotated[str, AfterValidator(check_id)]
Instant = Annotated[datetime, AfterValidator(check_instant)]
Metadata = Annotated[dict[str, Any], AfterValidator(check_metadata)]


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
