"""A per-memory field has one path (docs/architecture.md, "A field of a memory"): the wire
(ingest/memory_in.MemoryIn), the item (ingest/items.MemoryItem, and its JSON for a queued job), the row
(ingest/rows._row -> db/memories.MemoryRow, written by the upsert or staged by an import,
db/bulk.py), its column (a migration), and back out (the listing and the export, the client's
MemoryOut). Every field of a MemoryItem makes the whole trip, written by the route and by an
import: a field left out of one layer fails here."""

from __future__ import annotations

import json
from dataclasses import fields

from retrieval.ingest.importer import import_file
from retrieval.ingest.items import MemoryItem
from retrieval.ingest.memory_in import MemoryIn, parse_line

# Every field of a memory, none at its default.
FULL = {
    "id": "full",
    "content": "京都への出張は来週の金曜日。Sato-sanと一緒に行く。",
    "title": "出張",
    "created_at": "2025-03-01T09:00:00+09:00",
    "expires_at": "2199-01-01T00:00:00+00:00",
    "memory_type": "episodic",
    "source_type": "note",
    "metadata": {"project": "resonant", "n": 3},
    "links": [{"to": "other", "label": "caused_by"}],
    "thread": "trip-planning",
    "entities": ["京都", "Sato"],
    "event_time": {"start": "2025-03-07T00:00:00+09:00", "end": "2025-03-08T00:00:00+09:00"},
}
# What a listing shows of each (entities are read from the index: below).
SHOWN = ("content", "title", "memory_type", "source_type", "metadata", "thread", "event_time")


def test_every_field_of_an_item_is_the_wires_and_survives_a_jobs_json():
    names = {f.name for f in fields(MemoryItem)}
    assert names == set(FULL) and names <= set(MemoryIn.model_fields)
    item = MemoryIn.model_validate(FULL).item()
    defaults = MemoryItem(content="x")
    for name in names - {"content", "id"}:
        assert getattr(item, name) != getattr(defaults, name), name  # each one carries data
    assert MemoryItem.from_json(json.loads(json.dumps(item.to_json()))) == item


async def _check_stored(rt, client, ns: str) -> None:
    r = await client.get(f"/v1/memories/{FULL['id']}", params={"namespace": ns})
    assert r.status_code == 200, r.text
    got = r.json()
    for name in SHOWN:
        assert got[name] == FULL[name], name
    assert got["created_at"].startswith("2025-03-01T00:00:00")  # the instant, in UTC
    assert got["expires_at"].startswith("2199-01-01")
    assert [(ln["to"], ln["label"]) for ln in got["links"]] == [("other", "caused_by")]
    async with rt.pool.acquire() as conn:
        entities = await conn.fetch(
            "SELECT e.entity, e.weight FROM memory_entities e JOIN memories m ON m.id = e.memory_id"
            " WHERE m.namespace = $1 AND m.external_id = $2 ORDER BY 1",
            ns,
            FULL["id"],
        )
    assert [(e["entity"], e["weight"]) for e in entities] == [("sato", 1.0), ("京都", 1.0)]
    exported = [m for m in (await client.get("/v1/memories", params={"namespace": ns})).json()[
        "memories"
    ] if m["id"] == FULL["id"]]  # fmt: skip
    assert exported == [got]


async def test_every_field_is_stored_and_read_back_written_or_imported(rt, client, ns, tmp_path):
    r = await client.post("/v1/memories", json={"namespace": ns, "memories": [FULL]})
    assert r.status_code == 200, r.text
    await _check_stored(rt, client, ns)
    imported = f"{ns}-import"
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(FULL, ensure_ascii=False) + "\n", encoding="utf-8")
    report = await import_file(rt, path, namespace=imported, parse=parse_line)
    assert report.inserted == 1
    await _check_stored(rt, client, imported)
