"""`CachedEmbeddings`: memoise another `Embeddings` per exact text in a small SQLite file."""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import threading
from pathlib import Path

import numpy as np
from langchain_core.embeddings import Embeddings

logger = logging.getLogger(__name__)


class CachedEmbeddings(Embeddings):
    """Memoise another `Embeddings` per exact text in a small SQLite file.

    Repeated benchmark runs do not re-embed the same 6k turns; `prefetch` embeds
    many texts in batches up front, which is much faster than the one-text calls
    a memory service makes on `add`.
    """

    def __init__(self, inner: Embeddings, path: str | Path, namespace: str = "") -> None:
        self.inner = inner
        self.namespace = namespace or type(inner).__name__
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False)
        self._db.execute("CREATE TABLE IF NOT EXISTS vec (key TEXT PRIMARY KEY, v BLOB)")
        self._lock = threading.Lock()
        self._memo: dict[str, list[float]] = {}

    def close(self) -> None:
        """Close the cache's SQLite connection (the inner embedder is the caller's to close)."""
        with self._lock:
            self._db.close()

    def _key(self, text: str) -> str:
        return hashlib.sha256(f"{self.namespace}\x00{text}".encode()).hexdigest()

    def _load(self, texts: list[str]) -> None:
        """Read the stored vectors of `texts` (none of them memoised yet) into the memo."""
        with self._lock:
            for start in range(0, len(texts), 500):
                keys = {self._key(t): t for t in texts[start : start + 500]}
                marks = ",".join("?" * len(keys))
                for key, blob in self._db.execute(
                    f"SELECT key, v FROM vec WHERE key IN ({marks})", list(keys)
                ):
                    self._memo[keys[key]] = (
                        np.frombuffer(blob, dtype=np.float32).astype(float).tolist()
                    )

    def prefetch(self, texts: list[str], query: bool = False) -> None:
        """Embed the texts neither memoised nor stored, in one batch (`query`: one by one)."""
        self._load([t for t in dict.fromkeys(texts) if t not in self._memo])
        missing = [t for t in dict.fromkeys(texts) if t not in self._memo]
        if not missing:
            return
        logger.info("embedding %d new texts", len(missing))
        if query:
            vectors = [self.inner.embed_query(t) for t in missing]
        else:
            vectors = self.inner.embed_documents(missing)
        with self._lock:
            self._db.executemany(
                "INSERT OR REPLACE INTO vec VALUES (?, ?)",
                [
                    (self._key(t), np.asarray(v, dtype=np.float32).tobytes())
                    for t, v in zip(missing, vectors, strict=True)
                ],
            )
            self._db.commit()
            self._memo.update(zip(missing, vectors, strict=True))

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.prefetch(list(texts))
        return [self._memo[t] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        # MiniLM (symmetric) embeds queries and documents alike, so one cache serves both.
        return self.embed_documents([text])[0]
