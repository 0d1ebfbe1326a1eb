"""A typed Python client for the Retrieval Orchestrator's HTTP API, sync (`RetrievalClient`) and
async (`AsyncRetrievalClient`), reading the answers into the API's own models.

    from retrieval_client import RetrievalClient

    with RetrievalClient("http://127.0.0.1:8000", api_key="...") as c:
        c.remember([{"content": "来週の金曜に京都へ出張"}], namespace="agent-1")
        for r in c.retrieve("出張はいつ？", namespace="agent-1").results:
            print(r.score, r.content, r.reason)

What it does for the caller:
- **Errors by status**: every refusal is an `ApiError` subclass (`InvalidRequest` 422 with the
  fields named, `Unauthorized` 401, `Forbidden` 403, `NotFound` 404, `TooLarge` 413,
  `RateLimited` 429, `Unavailable` 503), carrying the status and the service's `detail`.
- **Retries**: 503 and 429 are tried again after their `Retry-After` (at most `max_wait_s` a
  time, `retries` times); so is a request that could not be sent or answered (connection
  refused, reset, timed out) — except a write whose memories have no `id`, which would be
  written twice if the first one had landed.
- **Timeouts**: `timeout` seconds for each attempt (connect, read, write, pool).
- **Read your writes**: after a write of a namespace (with read replicas), the `lsn` it answered
  with is sent with this client's next reads of that namespace (`options.after_lsn`), so a
  read replica behind the write does not answer them — also when another process of the
  service took the write.
- A write that the service queues as a job (202) returns the `JobOut`; `wait_for_job` follows
  it until it is written.
"""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from pydantic import BaseModel, ValidationError

from retrieval_client.errors import BY_STATUS, ApiError, BadResponse, Unreachable

if TYPE_CHECKING:  # httpx loads with the first client (about 0.1 s): not at import
    import httpx
from retrieval_client.models import (
    ArchivedOut,
    ErasedOut,
    FeedbackOut,
    IngestOut,
    JobOut,
    MemoryOut,
    MemoryPage,
    PurgeOut,
    RetrieveResponse,
    RunOut,
)

RETRY_STATUSES = (429, 503)


def _retry_after(response: httpx.Response) -> float | None:
    """Retry-After as seconds: a number of seconds, or an HTTP date (RFC 9110) from now."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _error(response: httpx.Response) -> ApiError:
    try:
        body = response.json()
    except ValueError:
        body = None
    detail = body.get("detail", response.text) if isinstance(body, dict) else response.text
    cls = BY_STATUS.get(response.status_code, ApiError)
    return cls(response.status_code, detail, _retry_after(response))


class _Call:
    """One API call: what to send, how to read the answer, whether it may be sent twice."""

    def __init__(
        self,
        method: str,
        path: str,
        model: type[BaseModel] | None,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        idempotent: bool = True,
        accepted: type[BaseModel] | None = None,
    ) -> None:
        self.method, self.path, self.model = method, path, model
        self.json, self.params, self.idempotent, self.accepted = json, params, idempotent, accepted


class _Base:
    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        retries: int = 3,
        max_wait_s: float = 10.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        import httpx

        self.timeout = httpx.Timeout(timeout)
        self.retries = retries
        self.max_wait_s = max_wait_s
        self._transport_error = httpx.TransportError
        self._lsn: dict[str, str] = {}  # namespace -> the last write's WAL position

    # What each route sends (shared by both clients).

    def _retrieve(
        self,
        query: str,
        namespace: str,
        limit: int | None,
        recent_conversation: Iterable[Mapping[str, Any]] | None,
        options: Mapping[str, Any] | None,
    ) -> _Call:
        opts = dict(options or {})
        if limit is not None:
            opts["limit"] = limit
        if namespace in self._lsn and "after_lsn" not in opts:
            opts["after_lsn"] = self._lsn[namespace]
        body: dict[str, Any] = {"query": query, "namespace": namespace, "options": opts}
        if recent_conversation:
            body["recent_conversation"] = list(recent_conversation)
        return _Call("POST", "/v1/retrieve", RetrieveResponse, json=body)

    def _remember(self, memories: Iterable[Mapping[str, Any]], namespace: str) -> _Call:
        items = [dict(m) for m in memories]
        return _Call(
            "POST",
            "/v1/memories",
            IngestOut,
            json={"namespace": namespace, "memories": items},
            idempotent=all(m.get("id") for m in items),  # an upsert by id may be sent twice
            accepted=JobOut,
        )

    def _get(self, memory_id: str, namespace: str) -> _Call:
        params = {"namespace": namespace}
        if namespace in self._lsn:
            params["after_lsn"] = self._lsn[namespace]
        return _Call("GET", f"/v1/memories/{_segment(memory_id)}", MemoryOut, params=params)

    def _erase(self, memory_ids: str | Iterable[str], namespace: str) -> _Call:
        if isinstance(memory_ids, str):
            path = f"/v1/memories/{_segment(memory_ids)}"
            return _Call("DELETE", path, ErasedOut, params={"namespace": namespace})
        body = {"namespace": namespace, "ids": list(memory_ids)}
        return _Call("POST", "/v1/memories/erase", ErasedOut, json=body)

    def _archive(self, memory_id: str, namespace: str) -> _Call:
        path = f"/v1/memories/{_segment(memory_id)}/archive"
        return _Call("POST", path, ArchivedOut, params={"namespace": namespace})

    def _list(self, namespace: str, cursor: str | None, filters: Mapping[str, Any]) -> _Call:
        params: dict[str, Any] = {"namespace": namespace}
        for k, v in filters.items():
            if v is not None:
                params[k] = v.isoformat() if hasattr(v, "isoformat") else v
        if cursor is not None:
            params["cursor"] = cursor
        return _Call("GET", "/v1/memories", MemoryPage, params=params)

    def _purge(self, namespace: str) -> _Call:
        path = f"/v1/namespaces/{_segment(namespace)}/purge"
        return _Call("POST", path, PurgeOut, accepted=PurgeOut)

    def _purge_state(self, purge_id: str, namespace: str) -> _Call:
        path = f"/v1/purges/{_segment(purge_id)}"
        return _Call("GET", path, PurgeOut, params={"namespace": namespace})

    def _feedback(
        self,
        memory_id: str,
        namespace: str,
        run_id: str | None,
        negative: bool,
        comment: str | None,
    ) -> _Call:
        body = {
            "namespace": namespace,
            "memory_id": memory_id,
            "run_id": run_id,
            "negative": negative,
            "comment": comment,
        }
        return _Call("POST", "/v1/feedback", FeedbackOut, json=body, idempotent=False)

    def _run(self, run_id: str) -> _Call:
        return _Call("GET", f"/v1/runs/{_segment(run_id)}", RunOut)

    def _job(self, job_id: str, namespace: str) -> _Call:
        return _Call("GET", f"/v1/jobs/{_segment(job_id)}", JobOut, params={"namespace": namespace})

    # Answers.

    def _wait_s(self, response: httpx.Response | None, attempt: int) -> float:
        """How long before the next try: the service's Retry-After with up to a tenth more,
        else 0.5 s doubling, jittered over its whole span (callers that failed together do
        not come back together); at most max_wait_s."""
        after = _retry_after(response) if response is not None else None
        if after is not None:
            return min(self.max_wait_s, after * (1.0 + 0.1 * random.random()))
        return min(self.max_wait_s, random.uniform(0.0, 0.5 * 2**attempt))

    def _may_retry(self, call: _Call, response: httpx.Response | None, attempt: int) -> bool:
        if attempt >= self.retries:
            return False
        if response is None:  # not sent, or no answer: only what may land twice
            return call.idempotent
        return response.status_code in RETRY_STATUSES

    def _read(self, call: _Call, response: httpx.Response) -> Any:
        if response.status_code >= 400:
            raise _error(response)
        model = call.accepted if response.status_code == 202 and call.accepted else call.model
        try:
            out = model.model_validate(response.json()) if model is not None else response.json()
        except (ValueError, ValidationError) as exc:  # (a ValidationError is a ValueError too)
            raise BadResponse(
                response.status_code, f"not the API's answer: {str(exc)[:200]}"
            ) from exc
        if isinstance(out, IngestOut):
            self._note_written(out)
        return out

    def _note_written(self, report: IngestOut | None) -> None:
        """Remember a write's WAL position for the next reads of its namespace."""
        if report is not None and report.lsn:
            self._lsn[report.namespace] = report.lsn


async def _sleep(seconds: float) -> None:
    # asyncio is loaded by the first async call, not by `import retrieval_client`: a blocking
    # caller does not pay its ~40 ms of import.
    import asyncio

    await asyncio.sleep(seconds)


def _segment(value: str) -> str:
    """A path segment: the id's characters escaped (an id may hold '?', '#', spaces ...)."""
    return quote(value, safe="")


class RetrievalClient(_Base):
    """The API over HTTP, blocking. `transport`: an httpx transport (tests, proxies)."""

    def __init__(
        self, base_url: str, *, transport: httpx.BaseTransport | None = None, **kw: Any
    ) -> None:
        import httpx

        super().__init__(base_url, **kw)
        self._http = httpx.Client(
            base_url=self.base_url, headers=self.headers, timeout=self.timeout, transport=transport
        )

    def __enter__(self) -> RetrievalClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: _Call) -> Any:
        attempt = 0
        while True:
            response: httpx.Response | None = None
            try:
                response = self._http.request(
                    call.method, call.path, json=call.json, params=call.params
                )
            except self._transport_error as exc:
                if not self._may_retry(call, None, attempt):
                    raise Unreachable(0, f"{type(exc).__name__}: {exc}") from exc
            if response is not None and not self._may_retry(call, response, attempt):
                return self._read(call, response)
            time.sleep(self._wait_s(response, attempt))
            attempt += 1

    def retrieve(
        self,
        query: str,
        namespace: str = "default",
        *,
        limit: int | None = None,
        recent_conversation: Iterable[Mapping[str, Any]] | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> RetrieveResponse:
        """POST /v1/retrieve; `options` as the API's (time_range, context_window ...)."""
        out: RetrieveResponse = self._send(
            self._retrieve(query, namespace, limit, recent_conversation, options)
        )
        return out

    def remember(
        self, memories: Iterable[Mapping[str, Any]], namespace: str = "default"
    ) -> IngestOut | JobOut:
        """POST /v1/memories: IngestOut when written, JobOut when queued (see wait_for_job)."""
        out: IngestOut | JobOut = self._send(self._remember(memories, namespace))
        return out

    def wait_for_job(
        self, job: JobOut, *, poll_s: float = 1.0, timeout_s: float = 3600.0
    ) -> JobOut:
        """Follow a queued write until it is done (or failed: returned, with its `error`)."""
        deadline = time.monotonic() + timeout_s
        while job.state in ("queued", "running"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job.id} still {job.state} after {timeout_s} s")
            time.sleep(poll_s)
            job = self.job(job.id, job.namespace)
        self._note_written(job.report)
        return job

    def get(self, memory_id: str, namespace: str = "default") -> MemoryOut:
        """GET /v1/memories/{id}."""
        out: MemoryOut = self._send(self._get(memory_id, namespace))
        return out

    def erase(self, memory_ids: str | Iterable[str], namespace: str = "default") -> ErasedOut:
        """Erase for real: one memory (DELETE /v1/memories/{id}; NotFound when absent) or
        several (POST /v1/memories/erase; those absent listed in `not_found`)."""
        out: ErasedOut = self._send(self._erase(memory_ids, namespace))
        return out

    def archive(self, memory_id: str, namespace: str = "default") -> ArchivedOut:
        """POST /v1/memories/{id}/archive: kept, never found by a search again."""
        out: ArchivedOut = self._send(self._archive(memory_id, namespace))
        return out

    def list_memories(
        self, namespace: str = "default", *, cursor: str | None = None, **filters: Any
    ) -> MemoryPage:
        """GET /v1/memories: one page (`limit`, `thread`, `since`, `until`,
        `include_archived`); its `next_cursor` asks for the next."""
        out: MemoryPage = self._send(self._list(namespace, cursor, filters))
        return out

    def memories(self, namespace: str = "default", **filters: Any) -> Iterator[MemoryOut]:
        """Every memory of the namespace (with the filters of list_memories), page by page."""
        cursor: str | None = None
        while True:
            page = self.list_memories(namespace, cursor=cursor, **filters)
            yield from page.memories
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def purge(self, namespace: str) -> PurgeOut:
        """POST /v1/namespaces/{ns}/purge: erase everything the namespace holds (a job; see
        wait_for_purge)."""
        out: PurgeOut = self._send(self._purge(namespace))
        return out

    def wait_for_purge(
        self, purge: PurgeOut, *, poll_s: float = 1.0, timeout_s: float = 3600.0
    ) -> PurgeOut:
        """Follow a purge until it is done (or failed)."""
        deadline = time.monotonic() + timeout_s
        while purge.state == "running":
            if time.monotonic() > deadline:
                raise TimeoutError(f"purge {purge.id} still running after {timeout_s} s")
            time.sleep(poll_s)
            purge = self._send(self._purge_state(purge.id, purge.namespace))
        return purge

    def feedback(
        self,
        memory_id: str,
        namespace: str = "default",
        *,
        run_id: str | None = None,
        negative: bool = True,
        comment: str | None = None,
    ) -> FeedbackOut:
        """POST /v1/feedback: this memory did (not) help the run's answer."""
        out: FeedbackOut = self._send(
            self._feedback(memory_id, namespace, run_id, negative, comment)
        )
        return out

    def run(self, run_id: str) -> RunOut:
        """GET /v1/runs/{run_id}: a logged retrieval, with its plan and candidates."""
        out: RunOut = self._send(self._run(run_id))
        return out

    def job(self, job_id: str, namespace: str = "default") -> JobOut:
        """GET /v1/jobs/{id}."""
        out: JobOut = self._send(self._job(job_id, namespace))
        return out


class AsyncRetrievalClient(_Base):
    """The API over HTTP for asyncio; the same calls as RetrievalClient, awaited."""

    def __init__(
        self, base_url: str, *, transport: httpx.AsyncBaseTransport | None = None, **kw: Any
    ) -> None:
        import httpx

        super().__init__(base_url, **kw)
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=self.headers, timeout=self.timeout, transport=transport
        )

    async def __aenter__(self) -> AsyncRetrievalClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def _send(self, call: _Call) -> Any:
        attempt = 0
        while True:
            response: httpx.Response | None = None
            try:
                response = await self._http.request(
                    call.method, call.path, json=call.json, params=call.params
                )
            except self._transport_error as exc:
                if not self._may_retry(call, None, attempt):
                    raise Unreachable(0, f"{type(exc).__name__}: {exc}") from exc
            if response is not None and not self._may_retry(call, response, attempt):
                return self._read(call, response)
            await _sleep(self._wait_s(response, attempt))
            attempt += 1

    async def retrieve(
        self,
        query: str,
        namespace: str = "default",
        *,
        limit: int | None = None,
        recent_conversation: Iterable[Mapping[str, Any]] | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> RetrieveResponse:
        """POST /v1/retrieve; `options` as the API's (time_range, context_window ...)."""
        out: RetrieveResponse = await self._send(
            self._retrieve(query, namespace, limit, recent_conversation, options)
        )
        return out

    async def remember(
        self, memories: Iterable[Mapping[str, Any]], namespace: str = "default"
    ) -> IngestOut | JobOut:
        """POST /v1/memories: IngestOut when written, JobOut when queued (see wait_for_job)."""
        out: IngestOut | JobOut = await self._send(self._remember(memories, namespace))
        return out

    async def wait_for_job(
        self, job: JobOut, *, poll_s: float = 1.0, timeout_s: float = 3600.0
    ) -> JobOut:
        """Follow a queued write until it is done (or failed: returned, with its `error`)."""
        deadline = time.monotonic() + timeout_s
        while job.state in ("queued", "running"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job.id} still {job.state} after {timeout_s} s")
            await _sleep(poll_s)
            job = await self.job(job.id, job.namespace)
        self._note_written(job.report)
        return job

    async def get(self, memory_id: str, namespace: str = "default") -> MemoryOut:
        """GET /v1/memories/{id}."""
        out: MemoryOut = await self._send(self._get(memory_id, namespace))
        return out

    async def erase(self, memory_ids: str | Iterable[str], namespace: str = "default") -> ErasedOut:
        """Erase for real: one memory (DELETE /v1/memories/{id}; NotFound when absent) or
        several (POST /v1/memories/erase; those absent listed in `not_found`)."""
        out: ErasedOut = await self._send(self._erase(memory_ids, namespace))
        return out

    async def archive(self, memory_id: str, namespace: str = "default") -> ArchivedOut:
        """POST /v1/memories/{id}/archive: kept, never found by a search again."""
        out: ArchivedOut = await self._send(self._archive(memory_id, namespace))
        return out

    async def list_memories(
        self, namespace: str = "default", *, cursor: str | None = None, **filters: Any
    ) -> MemoryPage:
        """GET /v1/memories: one page (`limit`, `thread`, `since`, `until`,
        `include_archived`); its `next_cursor` asks for the next."""
        out: MemoryPage = await self._send(self._list(namespace, cursor, filters))
        return out

    async def memories(
        self, namespace: str = "default", **filters: Any
    ) -> AsyncIterator[MemoryOut]:
        """Every memory of the namespace (with the filters of list_memories), page by page."""
        cursor: str | None = None
        while True:
            page = await self.list_memories(namespace, cursor=cursor, **filters)
            for m in page.memories:
                yield m
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def purge(self, namespace: str) -> PurgeOut:
        """POST /v1/namespaces/{ns}/purge: erase everything the namespace holds (a job; see
        wait_for_purge)."""
        out: PurgeOut = await self._send(self._purge(namespace))
        return out

    async def wait_for_purge(
        self, purge: PurgeOut, *, poll_s: float = 1.0, timeout_s: float = 3600.0
    ) -> PurgeOut:
        """Follow a purge until it is done (or failed)."""
        deadline = time.monotonic() + timeout_s
        while purge.state == "running":
            if time.monotonic() > deadline:
                raise TimeoutError(f"purge {purge.id} still running after {timeout_s} s")
            await _sleep(poll_s)
            purge = await self._send(self._purge_state(purge.id, purge.namespace))
        return purge

    async def feedback(
        self,
        memory_id: str,
        namespace: str = "default",
        *,
        run_id: str | None = None,
        negative: bool = True,
        comment: str | None = None,
    ) -> FeedbackOut:
        """POST /v1/feedback: this memory did (not) help the run's answer."""
        out: FeedbackOut = await self._send(
            self._feedback(memory_id, namespace, run_id, negative, comment)
        )
        return out

    async def run(self, run_id: str) -> RunOut:
        """GET /v1/runs/{run_id}: a logged retrieval, with its plan and candidates."""
        out: RunOut = await self._send(self._run(run_id))
        return out

    async def job(self, job_id: str, namespace: str = "default") -> JobOut:
        """GET /v1/jobs/{id}."""
        out: JobOut = await self._send(self._job(job_id, namespace))
        return out
