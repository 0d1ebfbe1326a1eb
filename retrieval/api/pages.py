"""A listing's cursor: opaque to the caller, it says where the next page begins (the last id
given) and which listing it belongs to (a digest of the namespace and filters). A cursor that
was not made here, or is used with other filters, is refused by name (422, field `cursor`),
never read as something else."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from datetime import datetime

from db.memories import Page
from retrieval.errors import InvalidInput

_VERSION = 1


def _digest(namespace: str, page: Page) -> str:
    filters = [namespace, page.thread, _iso(page.since), _iso(page.until), page.include_archived]
    return hashlib.sha256(json.dumps(filters).encode()).hexdigest()[:16]


def _iso(t: datetime | None) -> str | None:
    return t.isoformat() if t is not None else None


def make_cursor(namespace: str, page: Page, last_id: str) -> str:
    """The cursor of the page after `last_id` of this listing."""
    body = {"v": _VERSION, "after": last_id, "of": _digest(namespace, page)}
    raw = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def read_cursor(cursor: str, namespace: str, page: Page) -> str:
    """The id a cursor says the next page begins after; InvalidInput when it is not one this
    listing gave."""
    bad = InvalidInput(
        [{"field": "cursor", "in": "query", "reason": "not a cursor this listing gave"}]
    )
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        body = json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise bad from None
    if not isinstance(body, dict) or body.get("v") != _VERSION:
        raise bad
    after = body.get("after")
    if not isinstance(after, str) or not after or body.get("of") != _digest(namespace, page):
        raise bad
    return after
