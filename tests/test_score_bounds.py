"""A score and a confidence never leave [0, 1], over random stores with random links (self-links
too: the API refuses them, the core still reads a store that has one), on the real database."""

from __future__ import annotations

import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retrieval.ingest.items import Link, MemoryItem
from retrieval.models import RetrievalOptions

WORDS = ["cat", "tennis", "ramen", "Kyoto", "budget", "ジム", "猫", "会議", "予算", "Sato"]
TEXTS = st.lists(st.sampled_from(WORDS), min_size=1, max_size=5).map(" ".join)
STORES = st.lists(st.tuples(TEXTS, st.lists(st.integers(0, 5), max_size=3)), min_size=1, max_size=6)


@given(store=STORES, question=TEXTS)
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
async def test_scores_and_confidences_stay_in_0_1(rt, store, question):
    ns = f"bounds-{uuid.uuid4().hex[:10]}"
    items = [
        MemoryItem(
            content=text,
            id=f"m{i}",
            links=tuple(Link(f"m{t % len(store)}", "same_topic") for t in targets),
        )
        for i, (text, targets) in enumerate(store)
    ]
    await rt.writer.write(items, ns)
    for q in (question, store[0][0]):
        got = await rt.orchestrator.retrieve(q, RetrievalOptions(namespace=ns, log_run=False))
        for r in got.results:
            assert 0.0 <= r.score <= 1.0, (q, r.id, r.score, r.signals)
            assert r.confidence is not None and 0.0 <= r.confidence <= 1.0
        answered = got.metadata.answered
        assert answered is not None and 0.0 <= answered.confidence <= 1.0
