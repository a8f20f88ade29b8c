"""`LanceDBHost`: what the executors (`_read.py`, `_write.py`, `_threads.py`) and the
re-embed (`_reembed.py`) use of `LanceDBMemoryService`. They annotate with it, not
with the service class that imports them, so no module imports another around a loop."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import lancedb
import numpy as np
import pyarrow as pa

from ...service.identity import EmbedderIdentity
from ...service.language import Language
from ...service.model_lock import ModelLock
from ...types import UserKey
from ._index import UserRows

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings


class LanceDBHost(Protocol):
    """The service's state and helpers its executors and re-embed run on."""

    language: Language
    _lock: threading.RLock
    _model_lock: ModelLock
    _embeddings: Embeddings | None
    _users: OrderedDict[UserKey, UserRows]
    _db: lancedb.DBConnection
    _directory_path: Path

    def _scan(self, where: str, columns: Sequence[str] | None = None) -> pa.Table:
        """The `records` rows matching `where` (only `columns`, when given)."""

    def _write(self, rows: list[dict[str, Any]], fresh: bool = False, drop: str = "") -> None:
        """Write `rows` in one table version (appended when `fresh`, else upserted)."""

    def _cached(self, user: UserKey) -> UserRows:
        """The user's rows at the cache's version, loaded on first touch."""

    def _forget(self, user: UserKey, threads: bool = True) -> None:
        """Drop the user's cached rows (and, with `threads`, reload the threads)."""

    def _next_seq(self) -> int:
        """The next row sequence number."""

    def _embed_texts(self, texts: Sequence[str]) -> list[np.ndarray | None]:
        """Each text's unit vector (None without an embedder)."""

    def _swap_vectors(
        self, rows: dict[str, int], matrix: np.ndarray, identity: EmbedderIdentity
    ) -> None:
        """Rewrite `records` with the re-embed's vectors, as one table version."""

    def _switch(self, embeddings: Embeddings) -> None:
        """After a re-embed's cutover: serve the new embedder."""
