"""The calibration: the fitted maps from a result's signals to its confidence, and the two
thresholds that label it (`confidence.json`, written by scripts/verifier/fit.py, which fits
them with these very maps).

A map is a logistic regression over the signals retrieval.rank.confidence reads. A result the
reader read is mapped with its logit (`read`), one it did not without (`unread`), one below the
first COVERED without the words it holds either (`tail`), and one whose speaker does not apply
by the same fitted without `who` (`*_whoever`). `high` and `answers` are the confidences from
which a result is labelled `high` and `medium` (retrieval.rank.final).
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from retrieval.rank.verifier import MODEL_DIR

PACKAGE = Path(__file__).resolve().parents[1]
# The code that computes the signals the maps read (beside the analyzer's keywords and names,
# which every stage reads): a change to any of it can move a signal, and then the fitted maps
# no longer fit it. Its fingerprint is written beside the maps (`fingerprint`), and a test fails
# when the two differ: refit (scripts/verifier/fit.py --write).
SIGNAL_CODE = (
    "analysis/reading.py",
    "analysis/answers.py",
    "analysis/speaker.py",
    "rank/confidence.py",
    "rank/verifier.py",
    "analysis/chars.py",
)
# What of the reader's card its logit depends on (the rest is provenance and figures).
READER_KEYS = ("layers", "head", "match", "input")

# The suffix of a map fitted without `who` in confidence.json ("unread_whoever").
WHOEVER = "_whoever"


@dataclass(frozen=True)
class Map:
    """A logistic map from signals to a probability."""

    weights: Mapping[str, float]
    intercept: float

    def __call__(self, signals: Mapping[str, float]) -> float:
        z = self.intercept + sum(w * signals.get(k, 0.0) for k, w in self.weights.items())
        return 1.0 / (1.0 + math.exp(-max(min(z, 40.0), -40.0)))


@dataclass(frozen=True)
class Calibration:
    """The fitted maps and thresholds (`confidence.json`)."""

    read: Map  # with the verifier's logit
    unread: Map  # without it
    tail: Map  # without it and the words held (below the first COVERED)
    high: float  # `relevance: high` from this confidence up
    answers: float  # the answer says `answered` from this confidence of its first result up
    # The same three fitted without `who`, for a result whose speaker does not apply (a
    # question about no one, a memory that says nobody's): `who` 0 means "cannot be told" where
    # the maps were fitted, and would mark down every memory of a store without speakers.
    whoever: Mapping[str, Map]

    @classmethod
    def load(cls, path: Path = MODEL_DIR / "confidence.json") -> Calibration:
        raw = json.loads(path.read_text())

        def m(name: str) -> Map:
            return Map(raw[name]["weights"], raw[name]["intercept"])

        return cls(
            read=m("read"),
            unread=m("unread"),
            tail=m("tail"),
            high=float(raw["thresholds"]["high"]),
            answers=float(raw["thresholds"]["answers"]),
            # A file fitted before these maps (fit.py writes them): the maps with `who`.
            whoever={
                k: m(k + WHOEVER if k + WHOEVER in raw else k) for k in ("read", "unread", "tail")
            },
        )

    def map_for(self, signals: Mapping[str, float]) -> Map:
        """The map for a result's signals: with the verifier's logit, with the words held, or
        neither; without `who` where it does not apply."""
        name = "read" if "verifier" in signals else "unread" if "coverage" in signals else "tail"
        if "who" not in signals:
            return self.whoever[name]
        return {"read": self.read, "unread": self.unread, "tail": self.tail}[name]


def _code_digest(source: str) -> str:
    """The syntax tree of a module without its docstrings: a comment or a docstring changes
    nothing that runs."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        text = first.value if isinstance(first, ast.Expr) else None
        if isinstance(text, ast.Constant) and isinstance(text.value, str):
            body[0] = ast.Pass()  # type: ignore[index]
    return ast.dump(tree, annotate_fields=False)


def signal_fingerprint(package: Path = PACKAGE, model_dir: Path = MODEL_DIR) -> str:
    """A digest of what the signals are computed by: the SIGNAL_CODE (as it runs) and the
    reader's weights (its graph, and the card's READER_KEYS)."""
    h = hashlib.sha256()
    for rel in SIGNAL_CODE:
        h.update(rel.encode() + b"\0" + _code_digest((package / rel).read_text("utf-8")).encode())
    h.update((model_dir / "verifier-int8.onnx").read_bytes())
    card = json.loads((model_dir / "verifier.json").read_text())
    h.update(json.dumps({k: card.get(k) for k in READER_KEYS}, sort_keys=True).encode())
    return h.hexdigest()[:16]


def fitted_fingerprint(path: Path = MODEL_DIR / "confidence.json") -> str | None:
    """The fingerprint of the code the shipped maps were fitted on (None: none written)."""
    got = json.loads(path.read_text()).get("fingerprint")
    return str(got) if got is not None else None
