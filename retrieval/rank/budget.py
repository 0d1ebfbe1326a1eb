"""A response budget: the results fitted into `options.max_chars` characters.

Best first, each result is returned whole (content and its context) when that fits what is
left; else as its highlight alone (content cut to the part that answers, `cut` set, context
dropped) when that fits; else it is left out and the next, smaller one may still fit. Nothing
goes past the budget, and the report says what was cut and what was left out.
"""

from __future__ import annotations

from dataclasses import replace

from retrieval.models import Budget, Result


def whole_chars(r: Result) -> int:
    """Characters a result costs whole: its content and its context's."""
    return len(r.content) + sum(len(c.content) for c in r.context)


def fit(results: list[Result], max_chars: int) -> tuple[list[Result], Budget]:
    """The results that fit max_chars (best first), and what was done to fit them."""
    used = 0
    kept: list[Result] = []
    report = Budget(max_chars=max_chars)
    for r in results:
        size = whole_chars(r)
        if used + size <= max_chars:
            kept.append(r)
            used += size
            report.whole += 1
        elif r.highlight is not None and used + len(r.highlight.text) <= max_chars:
            kept.append(replace(r, content=r.highlight.text, context=[], cut=True))
            used += len(r.highlight.text)
            report.cut.append(r.id)
        else:
            report.omitted.append(r.id)
    report.used_chars = used
    return kept, report
