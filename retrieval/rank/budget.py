"""A response budget: the results fitted into `options.max_chars` characters.

Best first, each result is returned whole (content and its context) when that fits what is
left; else as its highlight alone (content cut to the part that answers, `cut` set, context
dropped) when that fits; else it is left out and the next, smaller one may still fit. Nothing
goes past the budget, and the report says what was cut and what was left out.
"""

from __future__ import annotations

from retrieval_client.models import BudgetOut, ResultOut


def whole_chars(r: ResultOut) -> int:
    """Characters a result costs whole: its content and its context's."""
    return len(r.content) + sum(len(c.content) for c in r.context)


def fit(results: list[ResultOut], max_chars: int) -> tuple[list[ResultOut], BudgetOut]:
    """The results that fit max_chars (best first), and what was done to fit them."""
    used = 0
    kept: list[ResultOut] = []
    report = BudgetOut(max_chars=max_chars, used_chars=0, whole=0, cut=[], omitted=[])
    for r in results:
        size = whole_chars(r)
        if used + size <= max_chars:
            kept.append(r)
            used += size
            report.whole += 1
        elif r.highlight is not None and used + len(r.highlight.text) <= max_chars:
            kept.append(
                r.model_copy(update={"content": r.highlight.text, "context": [], "cut": True})
            )
            used += len(r.highlight.text)
            report.cut.append(r.id)
        else:
            report.omitted.append(r.id)
    report.used_chars = used
    return kept, report
