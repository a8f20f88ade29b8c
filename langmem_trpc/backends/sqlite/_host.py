"""`SQLiteHost`: what the executors (`_executor.py`, `_reads.py`) and the re-embed
(`_reembed.py`) use of `SQLiteMemoryService`. They annotate with it, not with the
service class that imports them, so no module imports another around a loop."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from ...service.language import Language
from ...service.model_lock import ModelLock
from ...types import UserKey
from ._connection import Database
from ._locks import FileClaims
from ._query import SearchCaches

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings


class SQLiteHost(Protocol):
    """The service's state and helpers its executors and re-embed run on."""

    language: Language
    _db: Database
    _caches: SearchCaches
    _file_claims: FileClaims
    _model_lock: ModelLock
    _embeddings: Embeddings | None
    _keyword_candidates: int | None

    def check_embedder(self, conn: sqlite3.Connection) -> None:
        """Refuse once a re-embed replaced the embedder the service opened with."""

    def _now(self) -> datetime:
        """UTC now, strictly increasing within the service."""

    def _embed(self, texts: Sequence[str]) -> list[bytes | None]:
        """Each text's unit vector as a float32 blob (None without an embedder)."""

    def _backfill_embeddings(self, user: UserKey, dim: int) -> None:
        """Embed the user's live memories stored without a vector of `dim` floats."""

    def _switch(self, embeddings: Embeddings, generation: int) -> None:
        """After a re-embed's cutover: serve the new embedder."""
