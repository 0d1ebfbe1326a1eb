"""CLI commands in-process, `retrieval eval` on the shared temporal and multi-hop sets, `retrieval bench`."""

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from retrieval.cli import main
from tests.helpers import shared_file


def test_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for cmd in (
        "serve",
        "migrate",
        "retokenize",
        "reembed-turns",
        "embed-passages",
        "mcp",
        "ingest",
        "query",
        "analyze",
        "eval",
        "eval-suite",
        "bench",
    ):
        assert cmd in out


def test_analyze_json(capsys):
    assert (
        main(["analyze", "先週話したIntentの内容", "--now", "2026-11-22T12:00:00+09:00", "--json"])
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["strategy"] == "temporal" and out["time_range"]["relative"] == "last_week"
    assert out["time_range"]["start"].startswith("2026-11-09") and "intent" in out["keywords"]
    assert set(out) >= {"query_type", "keywords", "entities", "time_range", "strategy", "params"}
    assert out["asks"] is None and out["params"]["answer_weight"] == 1.1
    assert out["params"]["hop_credit"] == 0.3
    assert main(["analyze", "アオバの納期はいつ？", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["asks"] == "date" and out["focus"] == "納期"


def test_analyze_plain_and_bad_now(capsys):
    assert main(["analyze", "ベクトル検索とキーワード検索の違い"]) == 0
    assert "comparative" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["analyze", "x", "--now", "yesterday"])
    assert e.value.code == 2
    assert "not an ISO 8601 time" in capsys.readouterr().err


def test_migrate_query_and_ingest_errors(env, ns, tmp_path, capsys):
    assert main(["migrate"]) == 0
    assert "up to date" in capsys.readouterr().out
    f = tmp_path / "m.jsonl"
    f.write_text(
        json.dumps({"id": "q1", "content": "Grafanaのダッシュボードを設定した"}, ensure_ascii=False)
        + "\n"
    )
    assert main(["ingest", str(f), "--namespace", ns]) == 0
    assert main(["query", "ダッシュボードの設定", "--namespace", ns, "--limit", "3"]) == 0
    out = capsys.readouterr().out
    assert "Grafanaのダッシュボード" in out and "found by" in out
    assert main(["query", "   ", "--namespace", ns]) == 2
    assert "query: must hold a visible character" in capsys.readouterr().err
    assert main(["ingest", str(tmp_path / "missing.jsonl")]) == 2


def test_eval_on_temporal_dev(env, capsys):
    d = shared_file("eval", "temporal_dev")
    if not d.exists():
        pytest.skip("shared/eval not present")
    args = [
        "eval",
        "--corpus",
        str(d / "corpus.jsonl"),
        "--queries",
        str(d / "queries.jsonl"),
        "--qrels",
        str(d / "qrels.tsv"),
        "--json",
    ]
    assert main(args) == 0
    cap = capsys.readouterr()
    first = (
        json.loads(cap.out.strip().splitlines()[-1])
        if cap.out.strip()
        else pytest.fail(cap.err[-2000:])
    )
    assert first["n_queries"] == 63 and first["hit@5"] >= 0.95
    assert first["windowed_queries"] > 0 and first["window_violations"] == 0
    assert "temporal" in first["by_strategy"]
    assert main(args) == 0  # the second run reuses the index
    captured = capsys.readouterr()
    assert "index reused" in captured.err


@pytest.mark.parametrize(
    ("queries", "qrels", "hit5", "mrr"),
    [
        (None, None, 0.95, 0.85),  # the targets on the dev set
        ("multihop_paraphrase_queries.jsonl", "multihop_paraphrase_qrels.tsv", 0.9, 0.8),
    ],
)
def test_eval_on_multihop_dev(env, capsys, queries, qrels, hit5, mrr):
    """Answers reachable only through a project's name or a reply, asked as the dev set asks
    and reworded by us (納期, 期日, 費用, 経費, …): the multi-hop wave must find them."""
    d = shared_file("eval", "multihop_dev")
    if not d.exists():
        pytest.skip("shared/eval not present")
    data = Path(__file__).parent.parent / "data"
    q = data / queries if queries else d / "queries.jsonl"
    r = data / qrels if qrels else d / "qrels.tsv"
    args = ["eval", "--corpus", str(d / "corpus.jsonl"), "--queries", str(q), "--qrels", str(r)]
    assert main([*args, "--json"]) == 0
    got = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert got["hit@5"] >= hit5 and got["mrr@10"] >= mrr, got


def test_bench_small(env, capsys):
    assert (
        main(
            [
                "bench",
                "--memories",
                "300",
                "--queries",
                "12",
                "--concurrency",
                "2",
                "--no-http",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["memories"] == 300
    assert {"analyze", "embed", "rerank", "total", "vector"} <= set(out["stages"])
    assert out["stages"]["total"]["p95_ms"] > 0
    assert main(["bench", "--memories", "300", "--queries", "4", "--no-http"]) == 0
    assert "reused" in capsys.readouterr().err


def test_bench_queries_are_distinct_and_apart_from_the_warm_up(capsys):
    from retrieval.evaluation.bench import MAX_QUERIES, WARM_UP, bench_queries

    warm, qs = bench_queries(2000)
    assert len(warm) == WARM_UP and len(qs) == 2000
    assert len(set(qs)) == 2000 and not set(warm) & set(qs)
    assert bench_queries(2000) == (warm, qs)  # the same queries every run
    with pytest.raises(SystemExit) as e:
        main(["bench", "--queries", str(MAX_QUERIES + 1)])
    assert e.value.code == 2 and "distinct benchmark queries" in capsys.readouterr().err


async def test_bench_finds_a_local_servers_cpu(settings):
    """The capacity figures (CPU per request) read the local server's process tree; a server
    elsewhere is not measured rather than measured wrong."""
    from retrieval.evaluation.bench import cpu_seconds, is_local, server_process

    dsn = settings.dsn()
    postmaster = await server_process(dsn)
    assert postmaster is not None and cpu_seconds(postmaster, reaped=True) > 0
    assert is_local("postgresql://u@localhost:5432/db") and is_local("postgresql:///db?host=/tmp")
    assert not is_local("postgresql://u@db.internal:5432/db")
    assert await server_process("postgresql://u@db.internal:5432/db") is None


def test_sample_is_shifted_to_now():
    from retrieval.ingest.sample import sample_items

    now = datetime.fromisoformat("2030-01-01T00:00:00+09:00")
    items, vectors = sample_items(now)
    assert len(items) >= 200 and vectors.shape == (len(items), 384)
    assert max(i.created_at for i in items) <= now
    assert (now - max(i.created_at for i in items)).days < 3


README_QUERY = "先週のジムでのトレーニング"


@pytest.mark.parametrize("day", range(7))
def test_readme_query_has_a_gym_session_last_week_on_any_weekday(day):
    """The sample is loaded 'now': whatever weekday that is, 先週 holds a gym memory."""
    from retrieval.analysis.time.expressions import parse_time
    from retrieval.ingest.sample import sample_items

    now = datetime.fromisoformat("2026-11-23T08:30:00+09:00") + timedelta(days=day)
    items, _ = sample_items(now)
    tr = parse_time(README_QUERY, now).range
    assert tr is not None
    assert any(tr.start <= i.created_at < tr.end for i in items if "ジム" in i.content)


@pytest.mark.parametrize("now", ["2026-11-23T08:30:00+09:00", "2026-11-29T22:00:00+09:00"])
async def test_readme_query_answers_with_the_gym(rt, ns, now):
    """The README's first query, on the sample loaded a Monday morning or a Sunday night:
    a gym session of last week comes first."""
    from retrieval.ingest.sample import sample_items
    from retrieval.models import RetrievalOptions

    at = datetime.fromisoformat(now)
    items, vectors = sample_items(at)
    await rt.writer.write(items, ns, vectors=vectors)
    resp = await rt.orchestrator.retrieve(README_QUERY, RetrievalOptions(namespace=ns, now=at))
    top = resp.results[0]
    assert "ジム" in top.content and "last_week" in top.reason


def _conversation_set(root: Path) -> Path:
    """A LoCoMo-shaped set: two conversations (a namespace each), questions asked in one."""
    d = root / "locomo_dev"
    d.mkdir(parents=True)
    turns = {
        "conv-a": [
            "Anna: I adopted a grey kitten called Pebble last weekend.",
            "Ben: Congrats! How is Pebble settling in?",
            "Anna: She sleeps on my keyboard all day.",
        ],
        "conv-b": [
            "Carl: I adopted a grey kitten called Pebble too, funny coincidence.",
            "Dana: I started painting watercolours of the harbour.",
        ],
    }
    lines = []
    for conv, texts in turns.items():
        for i, text in enumerate(texts):
            lines.append(
                {
                    "namespace": conv,
                    "id": f"{conv}.D1:{i + 1}",
                    "content": text,
                    "created_at": f"2023-05-08T13:56:0{i}+00:00",
                    "thread": "session_1",
                    "memory_type": "dialog",
                }
            )
    (d / "memories.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    queries = [
        ("q1", "conv-a", "What is the name of Anna's kitten?", "single-hop", ["conv-a.D1:1"]),
        ("q2", "conv-a", "Where does Pebble sleep?", "single-hop", ["conv-a.D1:3"]),
        ("q3", "conv-b", "What does Dana paint?", "multi-hop", ["conv-b.D1:2"]),
    ]
    (d / "queries.jsonl").write_text(
        "\n".join(
            json.dumps(
                {"namespace": ns, "qid": q, "query": t, "category": c, "relevant": r,
                 "now": "2023-06-01T00:00:00+00:00"}
            )
            for q, ns, t, c, r in queries
        ) + "\n"
    )  # fmt: skip
    (d / "qrels.tsv").write_text(
        "".join(f"{q}\t0\t{r}\t1\n" for q, _, _, _, rel in queries for r in rel)
    )
    return d


def test_eval_on_a_conversation_set(env, tmp_path, capsys):
    """Memories and questions name their namespace (one per conversation), qrels come in TREC's
    four columns, and the metrics are split by question category."""
    d = _conversation_set(tmp_path)
    args = ["eval", "--corpus", str(d / "memories.jsonl"), "--queries", str(d / "queries.jsonl")]
    assert main([*args, "--qrels", str(d / "qrels.tsv"), "--json"]) == 0
    got = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert got["n_queries"] == 3 and got["hit@5"] == 1.0 and got["recall@10"] == 1.0
    assert set(got["by_category"]) == {"single-hop", "multi-hop"}
    assert got["by_category"]["single-hop"]["n_queries"] == 2
    assert {"p50_ms", "p95_ms", "p99_ms"} <= set(got) and "embed" in got["stages"]


async def test_each_question_is_asked_in_its_own_conversation(rt, tmp_path):
    """conv-b also has a kitten called Pebble: a question of conv-a never sees it."""
    from retrieval.evaluation import ensure_index, read_qrels, read_queries, run_eval

    d = _conversation_set(tmp_path)
    ns = "t-conv-" + tmp_path.name[-8:].replace("_", "-")
    await ensure_index(rt, d / "memories.jsonl", ns, None)
    res = await run_eval(
        rt, read_queries(d / "queries.jsonl"), read_qrels(d / "qrels.tsv"), namespace=ns
    )
    assert all(not x.startswith("conv-b") for x in res["_run"]["q1"])
    assert all(not x.startswith("conv-a") for x in res["_run"]["q3"])
    async with rt.pool.acquire() as conn:
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM memories WHERE namespace = $1", f"{ns}:conv-a"
            )
            == 3
        )
    # indexing again replaces the conversations (and reuses their vectors)
    await ensure_index(rt, d / "memories.jsonl", ns, None, force=True)


async def test_a_moment_when_no_source_answers_does_not_end_the_run(rt, tmp_path, monkeypatch):
    """Before: one question answered 503 (every leg past its deadline on a cold database)
    ended a ten-minute eval-suite. Now it is asked again; a lasting outage still fails."""
    import retrieval.evaluation.harness as harness
    from retrieval.errors import StoreUnavailable
    from retrieval.evaluation import ensure_index, read_qrels, read_queries, run_eval

    d = _conversation_set(tmp_path)
    ns = "t-again-" + tmp_path.name[-8:].replace("_", "-")
    await ensure_index(rt, d / "memories.jsonl", ns, None)
    real, calls = rt.orchestrator.retrieve, []

    async def flaky(text, options):
        calls.append(text)
        if len(calls) == 1 or fail_always:
            raise StoreUnavailable("no search source answered: vector: timed out after 800 ms")
        return await real(text, options)

    monkeypatch.setattr(rt.orchestrator, "retrieve", flaky)
    monkeypatch.setattr(harness, "ASK_AGAIN_PAUSE_S", 0.0)
    fail_always = False
    queries, qrels = read_queries(d / "queries.jsonl"), read_qrels(d / "qrels.tsv")
    res = await run_eval(rt, queries, qrels, namespace=ns)
    assert res["n_queries"] == 3 and len(calls) == 4 and res["hit@5"] == 1.0
    assert res["degraded_queries"] == 0
    fail_always, calls[:] = True, []
    with pytest.raises(StoreUnavailable):
        await run_eval(rt, queries, qrels, namespace=ns)
    assert len(calls) == 1 + harness.ASK_AGAIN


def test_eval_suite_prints_one_table_and_compares(env, tmp_path, capsys):
    _conversation_set(tmp_path)
    saved = tmp_path / "before.json"
    args = ["eval-suite", "--dir", str(tmp_path), "--sets", "locomo"]
    assert main([*args, "--save", str(saved)]) == 0
    out = capsys.readouterr().out
    assert "| locomo | 3 |" in out and "| locomo / multi-hop | 1 |" in out
    assert json.loads(saved.read_text())["sets"]["locomo"]["n_queries"] == 3
    assert main([*args, "--compare", str(saved)]) == 0
    assert "1.000 → 1.000" in capsys.readouterr().out
    # a set that is not there, a saved run that is not one: a message, not a traceback
    assert main(["eval-suite", "--dir", str(tmp_path), "--sets", "jsquad"]) == 2
    assert "missing jsquad" in capsys.readouterr().err
    # no sets folder at all (a checkout without ../shared): one line saying where to point
    assert main(["eval-suite", "--dir", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "point --dir" in err
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    assert main([*args, "--compare", str(bad)]) == 2
    assert "--compare" in capsys.readouterr().err


def test_a_question_is_asked_in_the_zone_of_its_now():
    from retrieval.evaluation.harness import clock_zone

    assert clock_zone(datetime.fromisoformat("2023-10-23T09:55:00+00:00")) == "UTC"
    assert clock_zone(datetime.fromisoformat("2026-11-22T12:00:00+09:00")) == "Etc/GMT-9"
    assert clock_zone(datetime.fromisoformat("2026-11-22T12:00:00-05:00")) == "Etc/GMT+5"
    # No whole-hour zone to name, or no clock at all: the service's own zone.
    assert clock_zone(datetime.fromisoformat("2026-11-22T12:00:00+05:30")) is None
    assert clock_zone(datetime(2026, 11, 22)) is None and clock_zone(None) is None


async def test_a_set_of_sessions_gzipped_and_run_by_a_question_prefix(rt, tmp_path):
    """LongMemEval's shape: memories gzipped, a haystack (namespace) per question, session
    recall beside turn recall; a run over the first questions indexes only their haystacks."""
    import gzip

    from retrieval.evaluation.harness import corpus_namespace, evaluate

    d = tmp_path / "longmemeval_dev"
    d.mkdir()
    lines, queries, qrels = [], [], []
    for n, (topic, answer) in enumerate(
        [
            ("camera", "I bought a Sony A7R IV for landscapes."),
            ("recipe", "My curry uses cardamom."),
        ]
    ):
        ns = f"lme-q{n}"
        for s, text in enumerate([answer, "We talked about the weather."]):
            lines.append({"namespace": ns, "id": f"q{n}.s{s}:1", "content": f"user: {text}",
                          "created_at": f"2023-05-0{s + 1}T10:00:00+00:00", "thread": f"s{s}",
                          "memory_type": "dialog"})  # fmt: skip
        queries.append({"namespace": ns, "qid": f"q{n}", "query": f"What did I say about my {topic}?",
                        "category": "single-session-user", "now": "2023-06-01T00:00:00+00:00",
                        "relevant": [f"q{n}.s0:1"], "relevant_sessions": ["s0"]})  # fmt: skip
        qrels.append(f"q{n}\t0\tq{n}.s0:1\t1")
    with gzip.open(d / "memories.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.write("\n".join(json.dumps(x) for x in lines) + "\n")
    (d / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries) + "\n")
    (d / "qrels.tsv").write_text("\n".join(qrels) + "\n")
    corpus = d / "memories.jsonl.gz"
    ns = corpus_namespace(corpus)
    res, cached, _ = await evaluate(
        rt, corpus, d / "queries.jsonl", d / "qrels.tsv", namespace=ns, max_queries=1
    )
    assert not cached and res["n_queries"] == 1 and res["session_any@5"] == 1.0, res
    async with rt.pool.acquire() as conn:
        held = dict(await conn.fetch(
            "SELECT namespace, count(*) FROM memories WHERE starts_with(namespace, $1) GROUP BY 1", ns
        ))  # fmt: skip
    assert held == {f"{ns}:lme-q0": 2}  # the second question's haystack was not indexed
    res, cached, _ = await evaluate(rt, corpus, d / "queries.jsonl", d / "qrels.tsv", namespace=ns)
    assert not cached and res["n_queries"] == 2  # the rest indexed now, the first kept
    assert res["by_category"]["single-session-user"]["session_all@5"] == 1.0
    _, cached, _ = await evaluate(rt, corpus, d / "queries.jsonl", d / "qrels.tsv", namespace=ns)
    assert cached
