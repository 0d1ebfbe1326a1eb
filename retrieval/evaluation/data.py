"""Labelled sets on disk: queries (JSONL), relevance judgements (TSV) and corpora (JSONL, or
gzipped JSONL), in the shapes of ../shared/eval: a plain set (`id`, `text`, `now`) or a
conversation set, whose memories and questions each carry their `namespace` (`qid`, `query`,
`now`, `category`; `relevant_sessions` where the answer is a session's)."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from retrieval.errors import InvalidInput
from retrieval.ingest.items import MemoryItem, json_lines
from retrieval.ingest.memory_in import parse_line
from retrieval.validation import duplicate_ids


@dataclass(frozen=True)
class EvalQuery:
    id: str
    text: str
    now: datetime | None
    # Conversation sets: the namespace (of the corpus's lines) to ask in, and the question's kind.
    namespace: str | None = None
    category: str | None = None
    # A long-memory set: the paragraph that answers, to check the result's highlight against.
    gold_text: str | None = None
    # A set of sessions (LongMemEval): the sessions (threads) that hold the answer.
    relevant_sessions: tuple[str, ...] = ()


def _query(obj: dict[str, object]) -> EvalQuery:
    qid = obj["id"] if "id" in obj else obj["qid"]
    text = obj["text"] if "text" in obj else obj["query"]
    now = datetime.fromisoformat(str(obj["now"])) if obj.get("now") else None
    ns, cat, gold = obj.get("namespace"), obj.get("category"), obj.get("gold_text")
    sessions = obj.get("relevant_sessions") or []
    if not isinstance(sessions, list):
        raise TypeError("relevant_sessions must be a list")
    return EvalQuery(
        str(qid),
        str(text),
        now,
        str(ns) if ns else None,
        str(cat) if cat else None,
        str(gold) if gold else None,
        tuple(str(x) for x in sessions),
    )


def read_queries(path: Path) -> list[EvalQuery]:
    """JSONL of {id | qid, text | query, now?, namespace?, category?}; a bad line is reported
    with its number."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                if not isinstance(obj, dict):
                    raise TypeError("each line must be a JSON object")
                out.append(_query(obj))
            except (json.JSONDecodeError, KeyError, ValueError, TypeError) as exc:
                raise InvalidInput(
                    [{"line": n, "field": "(query)", "reason": f"{type(exc).__name__}: {exc}"}]
                ) from exc
    return out


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """TSV `query_id, doc_id, relevance`, or TREC's `query_id, 0, doc_id, relevance` (a header
    line is skipped)."""
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            parts = line.rstrip("\n").split("\t")
            if len(parts) == 4:
                parts = [parts[0], parts[2], parts[3]]
            if len(parts) != 3 or not parts[2].strip().lstrip("-").isdigit():
                if n == 1 or not line.strip():
                    continue
                reason = "expected query_id<TAB>doc_id<TAB>relevance (or query_id<TAB>0<TAB>doc_id<TAB>relevance)"
                raise InvalidInput([{"line": n, "field": "(qrels)", "reason": reason}])
            qrels[parts[0]][parts[1]] = int(parts[2])
    return dict(qrels)


def read_corpus(path: Path) -> dict[str | None, list[tuple[int, MemoryItem]]]:
    """A corpus's memories by the namespace each line names (None: the line names none), each
    with its position in the file (the row of a precomputed vector file). Every line is
    validated first; a bad one is named by its number and nothing is returned."""
    groups: dict[str | None, list[tuple[int, MemoryItem]]] = defaultdict(list)
    errors: list[dict[str, object]] = []
    ids: list[str | None] = []
    lines: list[int] = []
    for row, (lineno, line) in enumerate(json_lines(path)):
        got = parse_line(line, lineno)
        if isinstance(got, list):
            errors.extend(got)
            continue
        # An unknown top-level key lands in metadata (MemoryItem): `namespace` is the corpus's.
        ns = got.metadata.pop("namespace", None)
        if ns is not None and not isinstance(ns, str):
            errors.append({"line": lineno, "field": "namespace", "reason": "must be a string"})
            continue
        groups[ns].append((row, got))
        ids.append(f"{ns}\0{got.id}" if got.id is not None else None)
        lines.append(lineno)
    errors.extend(duplicate_ids(ids, lines, key="line", noun="line"))
    if errors:
        raise InvalidInput(errors)
    return dict(groups)


def sessions_of(path: Path) -> dict[str, str]:
    """Each memory's session (its `thread`) in a corpus, by id: a turn ranking read as a ranking
    of sessions (LongMemEval's session recall)."""
    out: dict[str, str] = {}
    for lineno, line in json_lines(path):
        got = parse_line(line, lineno)
        if not isinstance(got, list) and got.id is not None and got.thread is not None:
            out[got.id] = got.thread
    return out


__all__ = ["EvalQuery", "read_corpus", "read_qrels", "read_queries", "sessions_of"]
