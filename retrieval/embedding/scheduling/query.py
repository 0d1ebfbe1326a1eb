"""Query embeddings with a bound per tenant: what one caller asks costs the others nothing.

Embedding is a request's costliest stage and the one a caller controls: a query and six
messages of 3,000 characters embedded whole would be a ~30 s job of one core, and four such
requests would hold every embedding thread while every other tenant's vector legs timed out.
So:

- each text is cut (`QUERY_EMBED_MAX_CHARS`: the query's start, the conversation text's end),
- a text is started only if it can finish before the request's deadline (its characters times
  the measured CPU seconds per character), and not at all once the request has given up,
- a tenant (retrieval.tenants: an API key, or a namespace without keys) may have at most
  `max_pending_s` estimated seconds of long embeddings in flight;
  past that its request is answered without vectors (its vector legs say why), never queued,
- a text that should take more than `LONG_EMBED_S` runs on a background thread (nice 19): the
  others' short queries go first, and a long query pays for its own length (its vector legs may
  time out) instead of every tenant paying for it; a cached text costs nothing, is not
  counted and waits for no thread,
- the threads serve the tenants in turn (retrieval.embedding.scheduling.lanes): a tenant's burst of new
  questions does not queue another tenant's question behind it,
- the cache is keyed by namespace and text: a hit, and its fast `embed` stage, tells no tenant
  what another asked.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict
from concurrent.futures import Future

import numpy as np

from retrieval.cache import ByteLRU
from retrieval.embedding.base import Embedder, lower_priority
from retrieval.embedding.scheduling.lanes import FairLane
from retrieval.embedding.scheduling.meter import EmbedMeter
from retrieval.errors import EmbeddingError

# Characters of a query embedded (the start), and of its conversation text (the end, which
# holds the question). At most ~1 token a character: ~0.6 s of one core here, inside the
# default 800 ms leg deadline; every question of the dev sets is shorter.
QUERY_EMBED_MAX_CHARS = 256


# A query text estimated to take longer than this is embedded in the background (the dev sets'
# questions take 10-60 ms here).
LONG_EMBED_S = 0.15


class EmbeddingBusy(EmbeddingError):
    """This tenant's earlier queries are still being embedded; this one gets no vectors."""


class QueryEmbeddings:
    """Embeds queries on threads of their own, cached, with the bounds above."""

    def __init__(
        self,
        embedder: Embedder,
        *,
        cache_bytes: int,
        threads: int = 4,
        max_pending_s: float = 1.0,
    ) -> None:
        self.embedder = embedder
        # Threads of their own: a hung embedding endpoint holds these, not the default executor
        # that the analyzer and the reranker need to answer at all. Tenants are served in turn
        # (retrieval.embedding.scheduling.lanes): one caller's burst of new questions is not a queue that
        # another's question waits at the end of.
        self.lane = FairLane(threads, name="embed")
        # Two: one tenant's long text (at most `max_pending_s` of them) never holds another
        # tenant's behind it.
        self.long_lane = FairLane(2, name="embed-long", initializer=lower_priority)
        self.cache: ByteLRU[np.ndarray] = ByteLRU(
            cache_bytes, lambda key, v: 100 + 4 * len(str(key)) + int(v.nbytes)
        )
        # Characters, not tokens: a query's cost is estimated on the event loop, and counting
        # tokens costs ~1 ms a text (a character is at most about one token; a text is short).
        self.meter = EmbedMeter(embedder, count=len)
        self.max_pending_s = max_pending_s
        self._pending: dict[str, float] = defaultdict(float)
        self._lock = threading.Lock()

    def costs(self, namespace: str, texts: list[str]) -> list[float]:
        """The estimated seconds of each text still to embed. What is cached costs nothing;
        each text is estimated on its own (a text, not the request, is what runs long)."""
        return [self._estimate([t]) for t in texts if (namespace, t) not in self.cache]

    def submit(
        self,
        namespace: str,
        texts: list[str],
        deadline: float,
        given_up: threading.Event,
        costs: list[float] | None = None,
        *,
        tenant: str | None = None,
    ) -> asyncio.Future[list[np.ndarray]]:
        """The texts' vectors (in order; a text that cannot finish by `deadline`, a monotonic
        time, and those after it are left out; cached per namespace); EmbeddingBusy at once when
        the tenant (retrieval.tenants; default the namespace) has too much embedding in flight.
        `costs`: self.costs(namespace, texts), when known."""
        if costs is None:
            costs = self.costs(namespace, texts)
        payer = tenant or namespace
        if not costs:  # every text cached: answered here, never queued behind anyone's work
            held = [self.cache.get((namespace, t)) for t in texts]
            if all(v is not None for v in held):
                done: asyncio.Future[list[np.ndarray]] = asyncio.get_running_loop().create_future()
                done.set_result([v for v in held if v is not None])
                return done
        cost = sum(costs)
        long = any(c > LONG_EMBED_S for c in costs)
        if long:
            with self._lock:
                if self._pending[payer] + cost > self.max_pending_s and self._pending[payer]:
                    fut: asyncio.Future[list[np.ndarray]] = (
                        asyncio.get_running_loop().create_future()
                    )
                    fut.set_exception(
                        EmbeddingBusy(
                            "this caller's earlier long queries are still being embedded "
                            f"(~{self._pending[payer]:.1f} s of work)"
                        )
                    )
                    return fut
                self._pending[payer] += cost
        job: Future[list[np.ndarray]] = (self.long_lane if long else self.lane).submit(
            payer, self._embed_all, namespace, texts, deadline, given_up, long
        )
        if long:
            job.add_done_callback(lambda _: self._release(payer, cost))
        return asyncio.wrap_future(job)

    def start(
        self,
        namespace: str,
        tenant: str,
        query: str,
        conversation: tuple[tuple[str, str], ...],
        deadline: float,
    ) -> QueryEmbedding:
        """Embed a request's query (and its conversation text) by `deadline` (a monotonic time),
        with the bounds above, `tenant`'s backlog charged."""
        texts = query_texts(query, conversation)
        costs = self.costs(namespace, texts)
        given_up = threading.Event()
        vectors = self.submit(namespace, texts, deadline, given_up, costs, tenant=tenant)
        return QueryEmbedding(vectors, costs, given_up)

    def _release(self, tenant: str, cost: float) -> None:
        with self._lock:
            left = self._pending[tenant] - cost
            if left <= 1e-9:
                del self._pending[tenant]
            else:
                self._pending[tenant] = left

    def _estimate(self, texts: list[str]) -> float:
        rate = self.meter.seconds_per_unit
        return self.meter.units(texts) * rate if rate is not None else 0.0

    def _embed_all(
        self,
        namespace: str,
        texts: list[str],
        deadline: float,
        given_up: threading.Event,
        background: bool = False,
    ) -> list[np.ndarray]:
        out = []
        for i, text in enumerate(texts):
            if given_up.is_set():
                break
            if i > 0 and time.monotonic() + self._estimate([text]) > deadline:
                break  # the first text is always tried; a later one only if it can be used
            once = _Once(self, text, background)
            out.append(self.cache.get_or_compute((namespace, text), once))
        if not out:
            raise asyncio.CancelledError
        return out

    def one(self, text: str, background: bool = False) -> np.ndarray:
        """One text's vector (`background`: on the long lane's threads, never spread over every
        core); its thread's CPU time goes into the rate (wall time would grow with the load,
        and every query would look long on a busy machine)."""
        t = time.thread_time()
        v = self.embedder.embed_query(text, background=background)
        self.meter.record(self.meter.units([text]), time.thread_time() - t)
        return v

    def close(self) -> None:
        self.lane.shutdown()
        self.long_lane.shutdown()


class _Once:
    def __init__(self, owner: QueryEmbeddings, text: str, background: bool) -> None:
        self.owner, self.text, self.background = owner, text, background

    def __call__(self) -> np.ndarray:
        return self.owner.one(self.text, self.background)


# The conversation's last three exchanges join the question (ref-llmless-hybrid-rerank, Phase 1).
MAX_CONVERSATION_MESSAGES = 6


def conversation_text(query: str, conversation: tuple[tuple[str, str], ...]) -> str | None:
    """The recent conversation's last messages, then "---" and the query; None without one."""
    msgs = [
        f"{role}: {content}"
        for role, content in conversation[-MAX_CONVERSATION_MESSAGES:]
        if content.strip()
    ]
    return "\n".join(msgs) + "\n---\n" + query if msgs else None


def query_texts(query: str, conversation: tuple[tuple[str, str], ...] = ()) -> list[str]:
    """What a query embeds: its start, and the end of its conversation text (when it has one),
    each QUERY_EMBED_MAX_CHARS at most."""
    texts = [query[:QUERY_EMBED_MAX_CHARS]]
    joined = conversation_text(query, conversation)
    if joined is not None:
        texts.append(joined[-QUERY_EMBED_MAX_CHARS:])
    return texts


class QueryEmbedding:
    """One request's query embedding in flight: its vectors (a future), what it is estimated to
    cost, and how long it took once done while the request still waited for it."""

    def __init__(
        self,
        vectors: asyncio.Future[list[np.ndarray]],
        costs: list[float],
        given_up: threading.Event,
    ) -> None:
        self.vectors = vectors
        self.costs = costs
        self.given_up = given_up
        self.started = time.perf_counter()
        self.ms = 0.0
        vectors.add_done_callback(self._timed)

    def _timed(self, _: object) -> None:  # on the loop, while the request still waits for it
        if not self.given_up.is_set():
            self.ms = (time.perf_counter() - self.started) * 1000.0

    def used(self) -> bool:
        """Whether the vectors are there (done, not cancelled, no error)."""
        v = self.vectors
        return v.done() and not v.cancelled() and v.exception() is None

    def abandon(self) -> None:
        """The request no longer waits: a text not started yet is not embedded for nobody."""
        self.given_up.set()
        self.vectors.cancel()

    def spent_s(self) -> float:
        """What the embedding cost (estimated): nothing when it was refused as busy."""
        v = self.vectors
        refused = v.done() and not v.cancelled() and isinstance(v.exception(), EmbeddingBusy)
        return 0.0 if refused else sum(self.costs)
