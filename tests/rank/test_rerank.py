"""Fusion and reranking: pure functions, literal inputs, no database."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from retrieval.analysis.strategy import HYBRID, KEYWORD_BOOST, TEMPORAL, _w
from retrieval.models import Fusion, ScoredResult, Source, TimeRange
from retrieval.rank.fusion import fuse_weighted, minmax, rrf
from retrieval.rank.rerank import dedupe, rerank
from retrieval.rank.window import in_window, recency_factor
from tests.fakes import cand
from tests.helpers import asked

NOW = datetime(2026, 11, 22, tzinfo=UTC)


def test_minmax():
    assert minmax([2.0, 4.0, 3.0]) == [0.0, 1.0, 0.5]
    assert minmax([5.0]) == [1.0]
    assert minmax([]) == []


def test_weighted_fusion_follows_spec_weights():
    per = {
        Source.VECTOR: [cand(1, 0.9, Source.VECTOR), cand(2, 0.5, Source.VECTOR)],
        Source.KEYWORD: [cand(2, 10.0, Source.KEYWORD), cand(3, 1.0, Source.KEYWORD)],
    }
    fused = fuse_weighted(per, {Source.VECTOR: 0.7, Source.KEYWORD: 0.3})
    assert fused[1].score == pytest.approx(0.7)
    assert fused[2].score == pytest.approx(0.3)
    assert fused[3].score == pytest.approx(0.0)
    assert fused[2].signals["keyword"] == 10.0 and fused[2].signals["vector_norm"] == 0.0


def test_rrf_k60():
    per = {
        Source.VECTOR: [cand(1, 0.9, Source.VECTOR), cand(2, 0.8, Source.VECTOR)],
        Source.KEYWORD: [cand(2, 3.0, Source.KEYWORD)],
    }
    fused = rrf(per, {Source.VECTOR: 1.0, Source.KEYWORD: 1.0}, k=60)
    assert fused[1].score == pytest.approx(1 / 61)
    assert fused[2].score == pytest.approx(1 / 62 + 1 / 61)


def test_recency_factor():
    old = NOW - timedelta(days=30)
    assert recency_factor(old, NOW, half_life_days=30, weight=0.2) == pytest.approx(0.9)
    assert recency_factor(old, NOW, half_life_days=30, weight=0.0) == 1.0
    assert recency_factor(NOW + timedelta(days=1), NOW, half_life_days=30, weight=0.5) == 1.0


def _scored(i, emb, content, score=1.0):
    return ScoredResult(
        cand(i, score, Source.VECTOR, content=content, emb=np.asarray(emb, np.float32)),
        score,
        {},
        ["vector"],
    )


def test_dedupe_needs_both_vector_and_text_closeness():
    a = _scored(1, [1, 0, 0], "Resonant Engineは呼吸のリズムで動作する")
    b = _scored(2, [0.99, 0.01, 0], "Resonant Engineは呼吸のリズムで動作する。")
    c = _scored(3, [0.99, 0.02, 0], "ジムで筋トレをした。ベンチプレスは40kgまで上がった。")
    kept, dropped = dedupe([a, b, c], 0.95)
    assert [r.candidate.id for r in kept] == [1, 3]
    assert dropped == [("m2", "m1")]


def test_in_window_half_open():
    w = TimeRange(NOW - timedelta(days=7), NOW)
    assert in_window(NOW - timedelta(days=7), w) and not in_window(NOW, w)
    assert in_window(NOW, None)


def test_rerank_window_first_then_outside():
    w = TimeRange(NOW - timedelta(days=7), NOW, "last_week")
    inside = cand(1, 0.80, Source.TEMPORAL, created_at=NOW - timedelta(days=3))
    outside = cand(
        2,
        0.95,
        Source.VECTOR,
        created_at=NOW - timedelta(days=100),
        emb=np.eye(8, dtype=np.float32)[5],
    )
    per = {
        Source.TEMPORAL: [inside],
        Source.VECTOR: [outside, cand(1, 0.80, Source.VECTOR, created_at=NOW - timedelta(days=3))],
    }
    res, before = rerank(per, TEMPORAL, *asked(limit=10), now=NOW, window=w)
    assert [r.candidate.id for r in res] == [1, 2]
    assert res[1].window == "outside" and "outside last_week" in res[1].reason
    assert res[0].window == "inside"
    assert "inside last_week" in res[0].reason and before == 2


def test_a_window_holding_none_of_the_questions_words_is_set_aside():
    """The question's words were found only outside the window read from it (it repeats a
    memory's own "last Thursday", said a week earlier): the window's unrelated memories do not
    go first, relevance decides, and each reason says the window was set aside (each result
    still labelled by where it lies against the window). Once one
    memory with the words lies in the window, the window comes first again."""
    w = TimeRange(NOW - timedelta(days=7), NOW, "last_thursday")
    old = NOW - timedelta(days=12)
    said = cand(1, 0.88, Source.VECTOR, created_at=old)
    unrelated = cand(2, 0.80, Source.TEMPORAL, created_at=NOW - timedelta(days=3))
    per = {
        Source.TEMPORAL: [unrelated],
        Source.VECTOR: [said, cand(2, 0.80, Source.VECTOR, created_at=unrelated.created_at)],
        Source.KEYWORD: [cand(1, 15.0, Source.KEYWORD, created_at=old)],
    }
    res, _ = rerank(per, TEMPORAL, *asked(limit=10), now=NOW, window=w)
    assert [r.candidate.id for r in res] == [1, 2]
    assert all("last_thursday set aside" in r.reason for r in res)
    # Still said where each lies, but not scaled below the window's.
    assert res[0].window == "outside" and "outside last_thursday" in res[0].reason
    assert "outside_window" not in res[0].signals and res[0].score > res[1].score
    assert "inside last_thursday" in res[1].reason

    per[Source.KEYWORD].append(cand(2, 2.0, Source.KEYWORD, created_at=unrelated.created_at))
    res, _ = rerank(per, TEMPORAL, *asked(limit=10), now=NOW, window=w)
    assert [r.candidate.id for r in res] == [2, 1]
    assert not any("set aside" in r.reason for r in res)
    assert res[1].window == "outside"


def test_scores_follow_the_window_first_order_and_weak_results_are_low():
    """An inside memory the legs scored ~0 ranks above a strong one outside the window: the
    outside one's returned score is brought below it (one factor, said in the reason), so the
    list is in score order, and each says where it lies (the labels: test_final)."""
    w = TimeRange(NOW - timedelta(days=7), None, None, "先週から")
    old = NOW - timedelta(days=100)
    per = {
        Source.TEMPORAL: [
            cand(1, 0.9, Source.TEMPORAL, created_at=NOW - timedelta(days=2)),
            cand(2, 0.1, Source.TEMPORAL, created_at=NOW - timedelta(days=3)),
        ],
        Source.VECTOR: [
            cand(3, 0.95, Source.VECTOR, created_at=old),
            cand(4, 0.80, Source.VECTOR, created_at=old),
            cand(1, 0.9, Source.VECTOR, created_at=NOW - timedelta(days=2)),
            cand(5, 0.2, Source.VECTOR, created_at=old),
        ],
    }
    res, _ = rerank(per, TEMPORAL, *asked(limit=10), now=NOW, window=w)
    assert [r.candidate.id for r in res][:2] == [1, 2]
    scores = [r.score for r in res]
    assert scores == sorted(scores, reverse=True), scores
    by_id = {r.candidate.id: r for r in res}
    assert by_id[2].score < 0.05 and by_id[2].window == "inside"
    assert by_id[3].window == "outside" and by_id[3].score <= by_id[2].score
    assert "below those inside" in by_id[3].reason
    assert by_id[3].score >= by_id[4].score  # their own order is kept


def test_rerank_threshold_labels_and_reasons():
    per = {
        Source.VECTOR: [cand(1, 0.9, Source.VECTOR), cand(2, 0.1, Source.VECTOR)],
        Source.KEYWORD: [cand(1, 5.0, Source.KEYWORD)],
    }
    res, before = rerank(per, KEYWORD_BOOST, *asked(limit=10), now=NOW)
    assert [r.candidate.id for r in res] == [1]
    assert res[0].window is None  # no window named
    assert "vector (cos 0.900" in res[0].reason and "keyword (bm25 5.000" in res[0].reason
    assert before == 2


def test_rerank_rrf_preset_scales_to_one():
    """A preset may fuse by reciprocal rank (k=60, ref-llmless-hybrid-rerank), scaled to 1."""
    rrf_preset = replace(
        HYBRID, fusion=Fusion.RRF, weights=_w(vector=1.0, keyword=1.0), lex_weight=0.0
    )
    per = {Source.VECTOR: [cand(1, 0.9, Source.VECTOR), cand(2, 0.8, Source.VECTOR)]}
    res, _ = rerank(per, rrf_preset, *asked(limit=5), now=NOW)
    assert res[0].score == pytest.approx(1.0 * res[0].signals["recency"])
    assert "rank 1" in res[0].reason


def test_rerank_considers_only_top_n():
    per = {
        Source.VECTOR: [
            cand(i, 1.0 - i / 200, Source.VECTOR, emb=np.random.default_rng(i).normal(size=8))
            for i in range(120)
        ]
    }
    res, before = rerank(per, HYBRID, *asked(limit=10), now=NOW)
    assert before == 120 and len(res) == 10
    # A candidate below the first 50 is not scored further, however well it matches the query:
    # the same text first at rank 10, nowhere at rank 60.
    for rank, found in ((10, True), (60, False)):
        per[Source.VECTOR][rank].content = "光合成の仕組みと葉緑体"
        res, _ = rerank(per, HYBRID, *asked("光合成の仕組みと葉緑体", limit=10), now=NOW)
        assert (res[0].candidate.id == rank) is found and (
            rank in {r.candidate.id for r in res}
        ) is found
        per[Source.VECTOR][rank].content = f"memory {rank}"


def test_fuzzy_window_soft_edge_is_near_not_inside_and_decays():
    """先週頃: the week is in-window; three days either side are near-window, scored down
    the further out they lie, and say so; beyond that, outside."""
    from retrieval.models import Granularity

    tz = UTC
    window = TimeRange(
        datetime(2026, 11, 9, tzinfo=tz),
        datetime(2026, 11, 16, tzinfo=tz),
        "last_week",
        "先週頃",
        Granularity.WEEK,
        datetime(2026, 11, 6, tzinfo=tz),
        datetime(2026, 11, 19, tzinfo=tz),
    )
    at = {
        1: datetime(2026, 11, 12, tzinfo=tz),
        2: datetime(2026, 11, 16, 12, tzinfo=tz),
        3: datetime(2026, 11, 18, 12, tzinfo=tz),
        4: datetime(2026, 11, 25, tzinfo=tz),
    }
    per = {
        Source.TEMPORAL: [
            cand(i, 0.9, Source.TEMPORAL, content=f"メモ{i}", created_at=at[i])
            for i in (4, 3, 2, 1)
        ]
    }
    out, _ = rerank(
        per, TEMPORAL, *asked(limit=4), now=datetime(2026, 11, 22, tzinfo=tz), window=window
    )
    ids = [r.candidate.id for r in out]
    assert ids == [1, 2, 3, 4]
    place = {r.candidate.id: r.window for r in out}
    assert place == {1: "inside", 2: "near", 3: "near", 4: "outside"}
    near = {r.candidate.id: r.signals["near_window"] for r in out if "near_window" in r.signals}
    assert 1.0 > near[2] > near[3] >= 0.5
    assert "near last_week (on its fuzzy edge" in out[1].reason and "inside" not in out[1].reason


def test_no_cache_entry_serves_two_memories_of_the_same_text():
    """Tenants never see each other's timings: a long memory's span index and a memory's
    n-gram set were cached by text alone, so a tenant asking about a memory whose text another
    tenant's memory has and was read lately got its answer faster (and the near-duplicate
    test's bigram sets, by text alone too). Each memory (its id) now has its own entries."""
    from retrieval.rank import highlight as hl
    from retrieval.rank import lexical as rr

    text = "共有された長い議事録の本文です。来週の会議は水曜日に移りました。" * 60
    assert len(text) > hl.PASSAGE_MAX_CHARS
    mine, theirs = cand(101, 0.9, Source.VECTOR, text), cand(202, 0.9, Source.VECTOR, text)
    misses, hits = hl._INDEX.misses, hl._INDEX.hits
    rr.highlights("会議は何曜日", [mine], {Source.VECTOR: [mine]})
    rr.highlights("会議は何曜日", [theirs], {Source.VECTOR: [theirs]})
    assert hl._INDEX.misses - misses == 2 and hl._INDEX.hits == hits
    rr.highlights("会議は何曜日", [theirs], {Source.VECTOR: [theirs]})  # its own entry: a hit
    assert hl._INDEX.hits == hits + 1
    short = "会議は水曜日に移りました"
    misses = rr._CODES.misses
    got = rr.lexical_overlap("会議は何曜日", {1: short, 2: short})
    assert got[1] == got[2] > 0 and rr._CODES.misses - misses == 2
    # The near-duplicate test's bigrams too (they were keyed by the text alone).
    misses = rr._BIGRAM_SETS.misses
    assert rr.char_bigrams(short, 101) == rr.char_bigrams(short, 202)
    assert rr._BIGRAM_SETS.misses - misses == 2


def test_the_other_side_of_a_chat_keeps_a_share():
    """A question about the asker's own life: the assistant's answer that repeats it (found
    by more legs, scored higher) goes below the user's own turn, said in its reason; a memory
    with no speaker's label is not moved. A question about what the assistant said: the
    other way round. A question of neither kind moves nothing."""
    turns = {
        1: "assistant: Turbinado sugar is a great choice for your cookies!",
        2: "user: I've been experimenting with turbinado sugar in my baking.",
        3: "a note with no label about sugar",
        4: "the weakest, dropped by the threshold",
    }
    per = {
        Source.VECTOR: [
            cand(i, s, Source.VECTOR, content=turns[i])
            for i, s in ((1, 0.9), (2, 0.8), (3, 0.75), (4, 0.1))
        ],
    }

    def order(speaker):
        res, _ = rerank(per, HYBRID, *asked(limit=10, speaker=speaker), now=NOW)
        return [r.candidate.id for r in res], res

    ids, res = order("user")
    assert ids.index(2) < ids.index(1)
    moved = next(r for r in res if r.candidate.id == 1)
    assert (
        moved.signals["other_speaker"] == 0.5 and "other side of the chat (x0.50)" in moved.reason
    )
    assert "other_speaker" not in next(r for r in res if r.candidate.id == 3).signals
    ids, res = order("assistant")
    assert ids[0] == 1 and ids.index(3) < ids.index(2)
    assert order(None)[0][:3] == [1, 2, 3]
