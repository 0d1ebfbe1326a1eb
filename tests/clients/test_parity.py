"""The sync and async clients are two hand-kept classes over one base (`_Base`: the calls, the
retries, the reading): they must offer the same methods, with the same parameters, defaults and
answers, method by method, so that code moves between them by adding `await`."""

from __future__ import annotations

import inspect

from retrieval_client import AsyncRetrievalClient, RetrievalClient

# The context-manager methods differ by protocol, not by meaning.
PROTOCOL = {"__enter__": "__aenter__", "__exit__": "__aexit__"}


def _public(cls: type) -> dict[str, object]:
    own = {
        n: f
        for n, f in vars(cls).items()
        if callable(f) and (not n.startswith("_") or n == "__init__")
    }
    return own


def _plain(annotation: object) -> object:
    """An annotation with its asynchronous kind named as the synchronous one (an async
    transport, an async iterator of the same items)."""
    if not isinstance(annotation, str):
        return annotation
    return annotation.replace("AsyncBaseTransport", "BaseTransport").replace(
        "AsyncIterator", "Iterator"
    )


def test_every_method_has_its_twin_with_the_same_parameters_and_answer():
    sync, asyn = _public(RetrievalClient), _public(AsyncRetrievalClient)
    assert set(sync) == set(asyn), set(sync) ^ set(asyn)
    assert len(sync) >= 14
    for name in sorted(sync):
        s, a = inspect.signature(sync[name]), inspect.signature(asyn[name])  # type: ignore[arg-type]
        assert list(s.parameters) == list(a.parameters), name
        for p in s.parameters:
            ps, pa = s.parameters[p], a.parameters[p]
            assert (ps.kind, ps.default) == (pa.kind, pa.default), (name, p)
            assert ps.annotation == _plain(pa.annotation), (name, p)
        assert s.return_annotation == _plain(a.return_annotation), name
        if name != "__init__":
            assert inspect.iscoroutinefunction(asyn[name]) or inspect.isasyncgenfunction(
                asyn[name]
            ), name
        assert not inspect.iscoroutinefunction(sync[name]), name


def test_the_context_managers_match():
    for s, a in PROTOCOL.items():
        assert hasattr(RetrievalClient, s) and hasattr(AsyncRetrievalClient, a)
