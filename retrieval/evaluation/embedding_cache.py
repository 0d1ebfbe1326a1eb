"""The evaluation's embedding cache: a passage text's vector, kept in a SQLite file beside the
evaluation store, so that indexing a set again (a new schema, a new tokenizer) embeds only
texts it has never embedded. The vectors are the configured model's own for that exact text
(the key is the model's name and the text's SHA-256); the service itself never uses this."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from pathlib import Path
from typing import Any

import numpy as np

_SCHEMA = "CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, vector BLOB NOT NULL)"


class CachedEmbedder:
    """An embedder whose passage vectors come from the cache where it has them."""

    def __init__(self, inner: Any, path: Path) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.path = path
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False)
        self._db.execute(_SCHEMA)
        self._db.commit()
        self.hits = 0
        self.misses = 0

    def _key(self, text: str) -> bytes:
        return hashlib.sha256(f"{self.name}\0{text}".encode()).digest()

    def embed_query(self, text: str, *, background: bool = False) -> np.ndarray:
        return self.inner.embed_query(text, background=background)

    def cost_units(self, text: str) -> int:
        return self.inner.cost_units(text)

    def __getattr__(self, attr: str) -> Any:  # the provider's own (token_ids and the like)
        return getattr(self.inner, attr)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        keys = [self._key(t) for t in texts]
        out = np.zeros((len(texts), self.dim), np.float32)
        with self._lock:
            found = {}
            for k in set(keys):
                row = self._db.execute("SELECT vector FROM vectors WHERE key = ?", (k,)).fetchone()
                if row is not None:
                    found[k] = np.frombuffer(row[0], np.float32)
        todo = [i for i, k in enumerate(keys) if k not in found]
        if todo:
            got = np.asarray(self.inner.embed_documents([texts[i] for i in todo]), np.float32)
            with self._lock:
                self._db.executemany(
                    "INSERT OR REPLACE INTO vectors (key, vector) VALUES (?, ?)",
                    [(keys[i], got[j].tobytes()) for j, i in enumerate(todo)],
                )
                self._db.commit()
            for j, i in enumerate(todo):
                found[keys[i]] = got[j]
        for i, k in enumerate(keys):
            out[i] = found[k]
        self.hits += len(texts) - len(todo)
        self.misses += len(todo)
        return out
