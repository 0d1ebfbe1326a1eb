"""Schemathesis fuzzes every route of the OpenAPI document against a real `retrieval serve`.

The assertion is schemathesis's: no 5xx, and every response matches the documented status
codes, content types and schemas. Bounded by FUZZ_EXAMPLES per route (default 25); a longer
run: `RETRIEVAL_FUZZ_EXAMPLES=500 pytest tests/api/test_fuzz.py`.
"""

import os

import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import checks

from tests.helpers import running_server

FUZZ_EXAMPLES = int(os.environ.get("RETRIEVAL_FUZZ_EXAMPLES", "25"))
KEY = "fuzz-key-0001"


# No 5xx, and responses as documented. Not `positive_data_acceptance`: the service refuses
# more than JSON Schema can say (NUL, lone surrogates, times outside 1900-2200, start after
# end), and those refusals are 422s by design (tests/api/test_hostile.py).
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_headers_conformance,
    checks.response_schema_conformance,
]

# Every route of the document, named so that a run that found none fails loudly.
EXPECTED = {
    "POST /v1/retrieve",
    "GET /v1/runs/{run_id}",
    "POST /v1/memories",
    "GET /v1/jobs/{job_id}",
    "GET /v1/memories/{memory_id}",
    "DELETE /v1/memories/{memory_id}",
    "GET /v1/memories",
    "POST /v1/memories/erase",
    "POST /v1/memories/{memory_id}/archive",
    "POST /v1/namespaces/{namespace}/purge",
    "GET /v1/purges/{purge_id}",
    "POST /v1/feedback",
    "GET /healthz",
    "GET /readyz",
    "GET /metrics",
}


def _fuzz(op, ran: dict[str, int]) -> None:
    ran[op.label] = 0

    @given(case=op.as_strategy())
    @settings(
        max_examples=FUZZ_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def fuzz(case):
        ran[op.label] += 1
        case.call_and_validate(
            headers={"Authorization": f"Bearer {KEY}"}, checks=CHECKS, timeout=30
        )

    fuzz()


def test_every_route_survives_fuzzing(rt):
    """A real server process on loopback over the test database, with auth on."""
    failures: dict[str, str] = {}
    ran: dict[str, int] = {}
    with running_server(rt.dsn, {"RETRIEVAL_API_KEYS": KEY}) as url:
        schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
        for result in schema.get_all_operations():
            op = result.ok()
            try:
                _fuzz(op, ran)
            except Exception as exc:  # collect every route's failure, then report them all
                failures[op.label] = f"{type(exc).__name__}: {str(exc)[:2000]}"
    print(f"fuzzed {sum(ran.values())} examples over {len(ran)} routes: {ran}")
    assert set(ran) == EXPECTED
    assert not failures, "\n\n".join(f"{k}\n{v}" for k, v in failures.items())
