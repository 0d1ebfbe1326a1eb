"""The service as an MCP server (Model Context Protocol, the official `mcp` SDK): the tools an
agent host gives a model — search memories, remember, forget, feedback.

Each tool calls the service's own HTTP API in process (an httpx ASGI transport, no socket),
through the light client (`retrieval_client`): the same validation, limits, tenant share, API
keys and namespace scopes as the REST routes, with no second copy of any of them. Over HTTP (`retrieval serve`
mounts it at `/mcp/`) the caller's `Authorization` header is passed on, so a key bound to
`nsA` can do nothing in `nsB` here either; over stdio (`retrieval mcp`, started by a local
host) the process acts with `RETRIEVAL_MCP_API_KEY` when keys are configured.

What a tool answers is text for a model to read: each memory's content (cut to
`MAX_CONTENT_CHARS`), its time, why it was chosen, the memories around it, and whether the
answer is degraded. Bad input is a tool error naming the field; an outage is a tool error that
says to retry, never an empty result.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Annotated, Any

import httpx
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from retrieval.api.deps import bearer_token
from retrieval.ingest.memory_in import Metadata
from retrieval_client import ApiError, AsyncRetrievalClient, InvalidRequest, Unavailable
from retrieval_client.models import EventTimeOut, IngestOut, JobOut, RetrieveResponse

# Characters of a memory's content a search result shows the model.
MAX_CONTENT_CHARS = 1500

INSTRUCTIONS = (
    "Long-term memory of conversations, notes and documents (Japanese and English). Call "
    "search_memories before answering anything that may depend on what was said or stored "
    "before; remember what should be recalled later; forget (erase) what is wrong or must not be "
    "kept; "
    "feedback when a found memory did not help."
)


class MemoryInput(BaseModel):
    """One memory to store."""

    content: str = Field(description="The text to remember.")
    id: str | None = Field(
        default=None, description="Your id for it: storing the same id again replaces it."
    )
    title: str | None = None
    created_at: str | None = Field(
        default=None,
        description="When it happened or was said, ISO 8601 with offset "
        "(2026-03-02T09:00:00+09:00); default now.",
    )
    memory_type: str | None = Field(default=None, description="e.g. dialog, note, state")
    # The API's own check (no NaN or Infinity, bounded depth and size): a value JSON cannot
    # carry must be refused here, by name, not fail the call to the routes.
    metadata: Metadata | None = None


def _tool_error(exc: ApiError) -> ToolError:
    """An API refusal as a message a model (and its host) can act on."""
    said = exc.detail
    if isinstance(said, list):  # the field list (422, 413, 415): each field and what is wrong
        said = "; ".join(f"{d.get('field')}: {d.get('msg')}" for d in said if isinstance(d, dict))
    if isinstance(exc, InvalidRequest):
        return ToolError(f"invalid input: {said}")
    if isinstance(exc, Unavailable) or exc.status in (429, 503):
        after = f" in {exc.retry_after_s:g} s" if exc.retry_after_s else ""
        return ToolError(f"temporarily unavailable, retry{after}: {said}")
    return ToolError(f"refused ({exc.status}): {said}")


def _when(t: datetime) -> str:
    return t.isoformat(timespec="minutes")


def _happened(ev: EventTimeOut) -> str:
    """When what a memory tells happened: its day (Sat 2026-02-14), or its first and last."""
    last = ev.end - timedelta(days=1)
    first = ev.start.strftime("%a %Y-%m-%d")
    return first if last.date() <= ev.start.date() else f"{first} to {last.strftime('%a %Y-%m-%d')}"


def render_results(answer: RetrieveResponse) -> str:
    """A retrieval as text for a model: best first, each with its time and reason."""
    meta = answer.metadata
    lines: list[str] = []
    if meta is not None and meta.degraded:
        lines.append(
            "NOTE: degraded answer, these sources did not answer in time: "
            + ", ".join(meta.degraded)
            + " (results may be incomplete; asking again may help)."
        )
    if not answer.results:
        lines.append("No memory matches.")
    elif meta is not None and meta.answered is not None and not meta.answered.answered:
        lines.append(
            "NOTE: none of these seems to answer the question (the first one is labelled low: "
            f"confidence {meta.answered.confidence:.2f}, answered from "
            f"{meta.answered.threshold:.2f}); they are the closest memories, not an answer."
        )
    for i, r in enumerate(answer.results, 1):
        content, h = r.content, r.highlight
        if len(content) > MAX_CONTENT_CHARS and h is not None and len(h.text) <= MAX_CONTENT_CHARS:
            # A long memory: the part that answers (its highlight), not its beginning.
            content = f"…{h.text}… [characters {h.start}-{h.end} of the memory]"
        elif len(content) > MAX_CONTENT_CHARS:
            content = content[:MAX_CONTENT_CHARS] + f"… [{len(r.content)} characters in all]"
        label = getattr(r.relevance, "value", r.relevance)
        conf = "" if r.confidence is None else f", confidence {r.confidence:.2f}"
        place = f" | {getattr(r.window, 'value', r.window)} the window" if r.window else ""
        told = "" if r.event_time is None else f" | happened {_happened(r.event_time)}"
        head = f"{r.id} | {_when(r.created_at)}{told} | score {r.score:.3f} | {label}{conf}{place}"
        lines.append(f"{i}. [{head}] {content}")
        lines.append(f"   why: {r.reason}")
        for c in r.context or []:
            side = "before" if c.position < 0 else "after"
            lines.append(f"   {side}: [{c.id} | {_when(c.created_at)}] {c.content[:300]}")
    if meta is not None:
        lines.append(f"run_id: {meta.run_id} (name it in feedback)")
    return "\n".join(lines)


Api = Callable[[Context], AsyncRetrievalClient]


def build(api: Api) -> MCPServer:
    """The MCP server; `api(ctx)` gives the client a tool call uses (the caller's key)."""
    server = MCPServer("retrieval-orchestrator", instructions=INSTRUCTIONS)
    for add in (_search_memories, _remember, _forget, _feedback):
        add(server, api)
    return server


def _search_memories(server: MCPServer, api: Api) -> None:
    @server.tool(
        description="Find the stored memories that answer a question, best first, each with "
        "its time, why it was chosen and the memories around it."
    )
    async def search_memories(
        query: Annotated[str, Field(description="The question or topic, in any language.")],
        ctx: Context,
        namespace: Annotated[str, Field(description="Whose memory (a tenant).")] = "default",
        limit: Annotated[int, Field(description="How many memories at most.")] = 10,
        start: Annotated[
            str | None, Field(description="Only memories from this time on (ISO 8601).")
        ] = None,
        end: Annotated[str | None, Field(description="Only memories before this time.")] = None,
        context_window: Annotated[
            int, Field(description="Memories before and after each result to include (0-5).")
        ] = 1,
        max_chars: Annotated[
            int | None,
            Field(
                description="At most this many characters of memory text in all: a long "
                "memory that does not fit whole comes as the part that answers."
            ),
        ] = None,
        timezone: Annotated[
            str | None,
            Field(
                description="The IANA time zone (Europe/London) the query's time words "
                "(yesterday, 先週) are read in; default the service's."
            ),
        ] = None,
    ) -> str:
        options: dict[str, Any] = {"context_window": context_window}
        if max_chars is not None:
            options["max_chars"] = max_chars
        if timezone is not None:
            options["timezone"] = timezone
        if start or end:
            options["time_range"] = {"start": start, "end": end}
        try:
            answer = await api(ctx).retrieve(query, namespace, limit=limit, options=options)
        except ApiError as exc:
            raise _tool_error(exc) from None
        return render_results(answer)


def _remember(server: MCPServer, api: Api) -> None:
    @server.tool(
        description="Store memories (1-1000) to recall later: conversation turns, notes, facts."
    )
    async def remember(
        memories: list[MemoryInput],
        ctx: Context,
        namespace: Annotated[str, Field(description="Whose memory (a tenant).")] = "default",
    ) -> str:
        items = [m.model_dump(exclude_none=True) for m in memories]
        try:
            out = await api(ctx).remember(items, namespace)
        except ApiError as exc:
            raise _tool_error(exc) from None
        if isinstance(out, JobOut):
            return (
                f"queued {out.received} memories as job {out.id} (written within about "
                f"{out.estimate_s:.0f} s); ids: {', '.join(out.ids)}"
            )
        assert isinstance(out, IngestOut)
        return (
            f"stored {out.received} memories ({out.inserted} new, {out.updated} updated); "
            f"ids: {', '.join(out.ids)}"
        )


def _forget(server: MCPServer, api: Api) -> None:
    @server.tool(
        description="Erase a memory for real: it is deleted with everything derived from it "
        "(it cannot be brought back; use it for what is wrong or must not be kept)."
    )
    async def forget(
        memory_id: Annotated[str, Field(description="The memory's id.")],
        ctx: Context,
        namespace: Annotated[str, Field(description="Whose memory (a tenant).")] = "default",
    ) -> str:
        try:
            out = await api(ctx).erase(memory_id, namespace)
        except ApiError as exc:
            raise _tool_error(exc) from None
        return f"erased {', '.join(out.erased)}"


def _feedback(server: MCPServer, api: Api) -> None:
    @server.tool(
        description="Say whether a memory a search found helped; one that did not is not "
        "returned again (until it is said to help)."
    )
    async def feedback(
        memory_id: Annotated[str, Field(description="The memory's id.")],
        helpful: Annotated[bool, Field(description="Did it help answer?")],
        ctx: Context,
        namespace: Annotated[str, Field(description="Whose memory (a tenant).")] = "default",
        run_id: Annotated[str | None, Field(description="The search's run_id, when known.")] = None,
    ) -> str:
        try:
            out = await api(ctx).feedback(memory_id, namespace, run_id=run_id, negative=not helpful)
        except ApiError as exc:
            raise _tool_error(exc) from None
        return f"noted for {memory_id}" + (
            " (returned by searches)" if out.searchable else " (no longer returned)"
        )


class ApiClients:
    """One in-process API client per key (the caller's, or `default_key`)."""

    def __init__(self, app: Any, default_key: str | None = None) -> None:
        self.transport = httpx.ASGITransport(app=app)
        self.default_key = default_key
        self._clients: dict[str | None, AsyncRetrievalClient] = {}

    def __call__(self, ctx: Context) -> AsyncRetrievalClient:
        key = bearer_token(_headers(ctx).get("authorization")) or self.default_key
        if key not in self._clients:
            if len(self._clients) > 1000:
                self._clients.clear()  # keys are few; this only bounds a caller trying many
            self._clients[key] = AsyncRetrievalClient(
                "http://mcp.internal", api_key=key, transport=self.transport, retries=0
            )
        return self._clients[key]

    async def close(self) -> None:
        for c in self._clients.values():
            await c.close()


def _headers(ctx: Context) -> dict[str, str]:
    try:
        h = ctx.headers
    except (ValueError, AttributeError):  # no request (stdio)
        return {}
    return {k.lower(): v for k, v in (h or {}).items()}


def mount(app: Any, keys: dict[str, frozenset[str] | None]) -> tuple[Any, ApiClients]:
    """The MCP server as streamable HTTP (stateless, JSON answers) for `app` to mount, and its
    in-process API clients. Without API keys it answers loopback hosts only (the SDK's DNS
    rebinding protection: a web page cannot reach a local, keyless service through it)."""
    from mcp.server.transport_security import TransportSecuritySettings

    clients = ApiClients(app)
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False) if keys else None
    http = build(clients).streamable_http_app(
        streamable_http_path="/",
        stateless_http=True,
        json_response=True,
        transport_security=security,
    )
    return http, clients
