"""The write path: validated items become analysed, embedded rows written in one transaction;
larger batches as jobs; files imported in stages."""

from retrieval.ingest.items import LinkIn, MemoryIn, parse_items
from retrieval.ingest.write import IngestReport, ingest

__all__ = ["IngestReport", "LinkIn", "MemoryIn", "ingest", "parse_items"]
