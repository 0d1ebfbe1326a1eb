"""HTTP API for the context assembler (FastAPI; OpenAPI at /openapi.json, pages at /docs) and the
MCP tools mounted at /mcp/. `create_app` builds it."""

from retrieval.api.app import create_app

__all__ = ["create_app"]
