"""The commands that serve: `serve` (the HTTP API and the MCP tools at /mcp/) and `mcp` (the MCP
tools over stdio, for a local agent host)."""

from __future__ import annotations

import argparse
import asyncio
import atexit
import ipaddress
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

from retrieval.api.access import logging_config
from retrieval.cli.common import err, opened
from retrieval.settings import Settings


async def _load_sample(settings: Settings) -> int:
    from retrieval.ingest.sample import load_sample

    async with opened(settings) as rt:
        return await load_sample(rt)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _shared_metrics_dir() -> None:
    """One truth for /metrics with several workers: each writes its samples to a directory of
    this start (emptied now: an earlier start's files would be added in), any worker sums them."""
    from retrieval.metrics import MULTIPROC_ENV, prepare_multiprocess_dir

    given = os.environ.get(MULTIPROC_ENV)
    path = Path(given) if given else Path(tempfile.mkdtemp(prefix="retrieval-metrics-"))
    os.environ[MULTIPROC_ENV] = str(prepare_multiprocess_dir(path))
    if not given:
        atexit.register(shutil.rmtree, path, True)


def listen(host: str, port: int) -> socket.socket:
    """The service's listening socket, bound before anything loads (a busy port is said at
    once, not after the models have loaded); OSError when it cannot be had."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP said, not left 0: asyncio turns Nagle off (TCP_NODELAY) only on connections
    # whose socket says TCP, and with Nagle on every answer waited ~40 ms for the client's
    # delayed ACK (10k bench over HTTP: p50 ~90 ms against ~47 in-process).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)  # uvicorn's worker processes serve on it too
    return sock


def serve(settings: Settings, args: argparse.Namespace) -> int:
    """`retrieval serve`: uvicorn in front of the app (retrieval.api.create_app), on a socket
    bound first; the embedded PostgreSQL (when DATABASE_URL is unset) is started here, before
    the workers, so that this process stops it when it exits (retrieval.cli.main)."""
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    try:
        sock = listen(args.host, args.port)
    except OSError as exc:
        return err(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}")
    try:
        settings.dsn()
        if args.sample:
            n = asyncio.run(_load_sample(settings))
            print(f"sample: {n} memories in namespace 'default'", file=sys.stderr)
        if not settings.parsed_api_keys() and not _is_loopback(args.host):
            print(
                f"WARNING: serving on {args.host} with no RETRIEVAL_API_KEYS: anyone who can "
                "reach this port can read, write and delete every namespace's memories",
                file=sys.stderr,
            )
        if args.workers > 1:
            _shared_metrics_dir()
        print(
            f"serving on http://{args.host}:{args.port} (OpenAPI at /docs, "
            f"{args.workers} worker(s))",
            file=sys.stderr,
        )
        config = uvicorn.Config(
            "retrieval.api:create_app",
            factory=True,
            host=args.host,
            port=args.port,
            workers=args.workers,
            # The server's own refusals (an unreadable request) in the API's JSON contract.
            http="retrieval.api.protocol:JsonHttpProtocol",
            log_level=settings.log_level.lower(),
            log_config=logging_config(settings.log_level, settings.log_format),
        )
        server = uvicorn.Server(config)
        if args.workers > 1:
            Multiprocess(config, sockets=[sock]).run()
        else:
            server.run(sockets=[sock])
    finally:
        sock.close()
    from retrieval.api.app import START_FAILED

    return err(f"the service could not start: {START_FAILED[0]}") if START_FAILED else 0


async def mcp(settings: Settings, args: argparse.Namespace) -> int:
    """`retrieval mcp`: the MCP tools over stdio; stdout carries the protocol only (logs go to
    stderr)."""
    from retrieval.api import create_app
    from retrieval.api.mcp import ApiClients, build

    app = create_app(settings)
    async with app.router.lifespan_context(app):
        await app.state.ready.wait()  # the runtime opens in the background
        api = ApiClients(app, default_key=settings.mcp_api_key)
        try:
            await build(api).run_stdio_async()
        finally:
            await api.close()
    return 0


def prepare_model(settings: Settings, args: argparse.Namespace) -> int:
    """`retrieval prepare-model`: build the onnx provider's graph into the model cache now (an
    image build runs it, so that no start has to)."""
    from retrieval.embedding.e5_weights import E5Weights
    from retrieval.embedding.onnx_e5 import graph_bytes, graph_path

    where = args.dir or settings.model_cache_dir
    if where is None:
        return err("no cache directory: set RETRIEVAL_MODEL_CACHE_DIR or give --dir")
    weights = E5Weights()
    graph_bytes(weights, where)
    path = graph_path(weights, where)
    if not path.exists():
        return err(f"could not write {path}")
    print(f"{path} ({path.stat().st_size / 1e6:.1f} MB)")
    return 0
