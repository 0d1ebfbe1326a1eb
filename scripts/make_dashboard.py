"""Writes grafana/dashboards/retrieval.json from the panel list below (run after editing it).

python scripts/make_dashboard.py
"""

from __future__ import annotations

import json
from pathlib import Path

# The data source is a variable (the dashboard imports into any Grafana, whatever its
# Prometheus is called); the `instance` variable picks pods (all by default).
DS = {"type": "prometheus", "uid": "${datasource}"}
Q = "histogram_quantile({q}, sum(rate({m}_bucket[$__rate_interval])) by (le{by}))"

# (title, unit, [(legend, expr)]) — one row of three panels at a time.
PANELS: list[tuple[str, str, list[tuple[str, str]]]] = [
    (
        "Retrieval latency (p50 / p95 / p99)",
        "ms",
        [
            (f"p{int(q * 100)}", Q.format(q=q, m="retrieval_latency_ms", by=""))
            for q in (0.5, 0.95, 0.99)
        ],
    ),
    (
        "p95 latency by strategy",
        "ms",
        [("{{strategy}}", Q.format(q=0.95, m="retrieval_latency_ms", by=", strategy"))],
    ),
    (
        "p95 latency by source",
        "ms",
        [("{{source}}", Q.format(q=0.95, m="retrieval_search_latency_ms", by=", source"))],
    ),
    (
        "Requests per second by strategy",
        "reqps",
        [
            (
                "{{strategy}}",
                "sum(rate(retrieval_strategy_usage_total[$__rate_interval])) by (strategy)",
            )
        ],
    ),
    (
        "Strategy usage share",
        "percentunit",
        [
            (
                "{{strategy}}",
                "sum(increase(retrieval_strategy_usage_total[$__range])) by (strategy)"
                " / ignoring(strategy) group_left sum(increase(retrieval_strategy_usage_total[$__range]))",
            )
        ],
    ),
    (
        "Empty-result rate",
        "percentunit",
        [
            (
                "empty",
                "sum(rate(retrieval_empty_results_total[$__rate_interval]))"
                " / sum(rate(retrieval_strategy_usage_total[$__rate_interval]))",
            )
        ],
    ),
    (
        "Source timeouts per second",
        "ops",
        [
            (
                "{{source}}",
                "sum(rate(retrieval_source_timeouts_total[$__rate_interval])) by (source)",
            )
        ],
    ),
    (
        "Source errors per second",
        "ops",
        [("{{source}}", "sum(rate(retrieval_source_errors_total[$__rate_interval])) by (source)")],
    ),
    (
        "Degraded answers per second",
        "ops",
        [("{{strategy}}", "sum(rate(retrieval_degraded_total[$__rate_interval])) by (strategy)")],
    ),
    (
        "Results before / after rerank (mean)",
        "short",
        [
            (
                "before",
                "sum(rate(retrieval_results_before_rerank_sum[$__rate_interval]))"
                " / sum(rate(retrieval_results_before_rerank_count[$__rate_interval]))",
            ),
            (
                "after",
                "sum(rate(retrieval_results_after_rerank_sum[$__rate_interval]))"
                " / sum(rate(retrieval_results_after_rerank_count[$__rate_interval]))",
            ),
        ],
    ),
    (
        "Stage latency p95 (analyze, embed, rerank)",
        "ms",
        [
            ("{{stage}}", Q.format(q=0.95, m="retrieval_stage_latency_ms", by=", stage")),
            ("rerank", Q.format(q=0.95, m="retrieval_rerank_latency_ms", by="")),
        ],
    ),
    (
        "Ingest rate (memories per second)",
        "ops",
        [("{{op}}", "sum(rate(retrieval_ingested_memories_total[$__rate_interval])) by (op)")],
    ),
    (
        "HTTP requests per second by route and status",
        "reqps",
        [
            (
                "{{route}} {{status}}",
                "sum(rate(retrieval_http_requests_total[$__rate_interval])) by (route, status)",
            )
        ],
    ),
    (
        "HTTP p95 latency by route",
        "ms",
        [("{{route}}", Q.format(q=0.95, m="retrieval_http_request_latency_ms", by=", route"))],
    ),
    (
        "Negative feedback per second",
        "ops",
        [("{{kind}}", "sum(rate(retrieval_feedback_total[$__rate_interval])) by (kind)")],
    ),
    (
        "Refusals and failures per second by status (422, 429, 503 …)",
        "reqps",
        [
            (
                "{{status}}",
                'sum(rate(retrieval_http_requests_total{status=~"4..|5.."}[$__rate_interval]))'
                " by (status)",
            )
        ],
    ),
    (
        "Requests per second by pod",
        "reqps",
        [
            (
                "{{instance}}",
                'sum(rate(retrieval_http_requests_total{instance=~"$instance"}'
                "[$__rate_interval])) by (instance)",
            )
        ],
    ),
    (
        "HTTP p95 latency by pod",
        "ms",
        [
            (
                "{{instance}}",
                "histogram_quantile(0.95, sum(rate(retrieval_http_request_latency_ms_bucket"
                '{instance=~"$instance"}[$__rate_interval])) by (le, instance))',
            )
        ],
    ),
    (
        "Write-job queue: depth and oldest wait",
        "short",
        [
            ("waiting", "max(retrieval_ingest_jobs_queued)"),
            ("oldest wait (s)", "max(retrieval_ingest_job_oldest_seconds)"),
        ],
    ),
    (
        "Readiness by pod (1 ready)",
        "short",
        [("{{instance}}", 'min(retrieval_ready{instance=~"$instance"}) by (instance)')],
    ),
]


def dashboard() -> dict:
    panels = []
    for i, (title, unit, targets) in enumerate(PANELS):
        panels.append(
            {
                "id": i + 1,
                "type": "timeseries",
                "title": title,
                "datasource": DS,
                "gridPos": {"h": 8, "w": 8, "x": (i % 3) * 8, "y": (i // 3) * 8},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
                "targets": [
                    {"refId": chr(65 + j), "datasource": DS, "expr": expr, "legendFormat": legend}
                    for j, (legend, expr) in enumerate(targets)
                ],
            }
        )
    return {
        "uid": "retrieval-orchestrator",
        "title": "Retrieval Orchestrator",
        "tags": ["retrieval"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "panels": panels,
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                },
                {
                    "name": "instance",
                    "label": "Pod",
                    "type": "query",
                    "datasource": DS,
                    "query": "label_values(retrieval_http_requests_total, instance)",
                    "includeAll": True,
                    "multi": True,
                    "allValue": ".*",
                    "current": {"text": "All", "value": "$__all"},
                    "refresh": 2,
                    "hide": 0,
                },
            ]
        },
        "annotations": {"list": []},
    }


def main() -> None:
    out = Path(__file__).resolve().parent.parent / "grafana" / "dashboards" / "retrieval.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
