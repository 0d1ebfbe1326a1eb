"""Quality measurement: labelled sets (`data`), one set through the real orchestrator
(`harness`, `retrieval eval`) and every dev set in one table (`suite`, `retrieval eval-suite`)."""

from retrieval.evaluation.data import EvalQuery, read_corpus, read_qrels, read_queries
from retrieval.evaluation.harness import (
    ForeignNamespace,
    corpus_namespace,
    ensure_index,
    run_eval,
    score,
)

__all__ = [
    "EvalQuery",
    "ForeignNamespace",
    "corpus_namespace",
    "ensure_index",
    "read_corpus",
    "read_qrels",
    "read_queries",
    "run_eval",
    "score",
]
