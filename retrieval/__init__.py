"""Retrieval Orchestrator: Japanese-first memory retrieval over PostgreSQL + pgvector.

Importing the package does nothing: the read path's owner is `retrieval.orchestrator`, the write
path's `retrieval.ingest.writer`, and `retrieval.runtime.open_runtime` builds both."""
