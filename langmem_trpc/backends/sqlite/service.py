"""`SQLiteMemoryService`: the embedded default backend (standard-library `sqlite3`).

One file holds every user's memories, history and cursors. Keyword search
runs on FTS5 over the package tokenizer's tokens and is scored with the
shared BM25F keyword relevance; vector search scores a per-user float32 matrix
with numpy. The semantics are `InMemoryMemoryService`'s, checked by the same
conformance suite.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ...service.capabilities import Capability
from ...service.identity import identify
from ...service.info import StoreInfo
from ...service.language import Language, resolve_language
from ...service.model_lock import ModelLock
from ...service.periods import TimeMentions
from ...service.protocol import SyncMemoryService
from ...service.reads import ReadPlan
from ...service.reembed import (
    DEFAULT_BATCH,
    ProgressCallback,
    ReembedInThread,
    ReembedPlan,
    ReembedReport,
)
from ...service.rules import Limits, check_user, embedding_text, utcnow
from ...service.search import unit_vector
from ...service.steps import Plan
from ...types import UserKey
from . import _identity
from . import _sql as sql
from ._claims import SQLiteClaims
from ._connection import Database
from ._executor import SQLiteRun
from ._expiry import ExpiryMixin
from ._locks import FileClaims
from ._query import SearchCaches
from ._reads import SQLiteReads
from ._reembed import SQLiteReembed
from ._reembed import plan as reembed_plan
from ._vectors import to_blob

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

__all__ = ["SQLiteMemoryService"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_EMBED_BATCH = 256


class SQLiteMemoryService(SQLiteClaims, ExpiryMixin, ReembedInThread, SyncMemoryService):
    """Durable memories in one SQLite file, safe for several threads and processes.

    Args:
        path: database file (parent folders are created), or ":memory:".
        embeddings: optional LangChain `Embeddings`; without one search is keyword-only.
        limits: text, topic and capacity limits (see `Limits`).
        vector_cache_bytes: bound on the per-user embedding matrices kept in memory.
        keyword_candidates: how many FTS5 candidates (best BM25 first) the
            keyword leg rescores with the shared keyword relevance; None means
            max(1.5 x pool, 90) (150 for the default pool of 100); every match
            is scored when fewer match. The one approximation of the backend:
            a document BM25 ranks below that cut is not scored.
        busy_timeout_ms: how long SQLite waits for another process's write.
        synchronous: SQLite `synchronous` pragma ("NORMAL" by default: WAL
            keeps the file consistent; a power cut may lose the last commits).
        language: the tokenizer's language (a Snowball name such as "german", or a
            `Language`; English by default). A new file records it; opening a file
            recorded under another language raises `ConfigurationError`.

    Example:
        ```python
        svc = SQLiteMemoryService("memories.db", embeddings=HashingEmbeddings())
        alice = UserKey("support", "alice")
        svc.add(alice, "Prefers dark mode", topics=["ui"])
        svc.search(alice, "dark mode?", SearchOptions(hybrid=True))
        ```
    """

    def __init__(
        self,
        path: str | Path,
        embeddings: Embeddings | None = None,
        *,
        limits: Limits | None = None,
        vector_cache_bytes: int = 1 << 30,
        keyword_candidates: int | None = None,
        busy_timeout_ms: int = 5_000,
        synchronous: str = "NORMAL",
        language: str | Language = "english",
    ) -> None:
        self.language = resolve_language(language)
        self._db = Database(
            path, busy_timeout_ms=busy_timeout_ms, synchronous=synchronous, language=self.language
        )
        self._embeddings = embeddings
        self._model_lock = ModelLock()
        self._generation: int | None = None
        """The recorded embedder's generation this service opened (None: no embedder)."""
        if embeddings is not None:
            self._adopt_identity(embeddings)
        self._file_claims = FileClaims(None if self._db.memory else self._db.path)
        self._limits = limits or Limits()
        self._caches = SearchCaches(vector_cache_bytes, self._db.read_detached, self.language)
        self._keyword_candidates = keyword_candidates
        self._clock_lock = threading.Lock()
        self._last_us = 0

    @property
    def capabilities(self) -> frozenset[Capability]:
        """VECTORS with an embedder; a file (not ":memory:") is DURABLE and CROSS_PROCESS."""
        found = set() if self._db.memory else {Capability.DURABLE, Capability.CROSS_PROCESS}
        if self._embeddings is not None:
            found.add(Capability.VECTORS)
        return frozenset(found)

    @property
    def path(self) -> str:
        return self._db.path

    def __repr__(self) -> str:
        return f"SQLiteMemoryService({self._db.path!r}, vectors={self.supports_vectors})"

    def setup(self) -> None:
        """Apply pending schema migrations (opening the file already did; idempotent)."""
        self._db.migrate()

    def close(self) -> None:
        """Stop the search threads (vector side scan, keyword index builder), then close
        every connection and the claim file and drop every cache; idempotent."""
        self._caches.close()
        self._db.close()
        self._file_claims.close()

    # -- helpers ----------------------------------------------------------------

    def _adopt_identity(self, embeddings: Embeddings) -> None:
        """Check `embeddings` against the file's recorded embedder (recording it on a file
        that has none); closes the file and raises `ConfigurationError` on a mismatch."""
        try:
            current = identify(embeddings)
            stored = self._db.write(lambda conn: _identity.adopt(conn, current, self._db.path))
        except BaseException:
            self._db.close()
            raise
        self._generation = stored.generation

    def check_embedder(self, conn: sqlite3.Connection) -> None:
        """Refuse (`ConfigurationError`) once a re-embed replaced the embedder this service
        opened with; run inside every search's and write's transaction."""
        if self._generation is not None:
            _identity.check_generation(conn, self._generation, self._db.path)

    def _now(self) -> datetime:
        """UTC now, strictly increasing within this service so orders stay stable."""
        wall_us = sql.to_us(utcnow()) or 0
        with self._clock_lock:
            us = self._last_us = max(wall_us, self._last_us + 1)
        return sql.from_us_required(us)

    def _embed(self, texts: Sequence[str]) -> list[bytes | None]:
        if self._embeddings is None:
            return [None] * len(texts)
        blobs: list[bytes | None] = []
        for start in range(0, len(texts), _EMBED_BATCH):
            chunk = list(texts[start : start + _EMBED_BATCH])
            blobs.extend(_unit_blobs(self._embeddings.embed_documents(chunk)))
        return blobs

    # -- writes: the step executor (`_executor.py`) ------------------------------

    def run_plan(self, plan: Plan[T]) -> T:
        """Run a write plan; its write section is one `BEGIN IMMEDIATE` transaction."""
        with self._model_lock.shared():  # one embedder from its Embed step to its commit
            return SQLiteRun(self).run(plan)

    # -- reads: the read executor (`_reads.py`) -----------------------------------

    def run_read(self, plan: ReadPlan) -> Any:
        """Run a read plan; from its first storage step on it reads one snapshot."""
        return SQLiteReads(self).run(plan)

    @property
    def time_mentions(self) -> TimeMentions:
        """Which memory texts say a time, cached for search ranking."""
        return self._caches.time_mentions

    def _checked(
        self, work: Callable[[sqlite3.Connection], T]
    ) -> Callable[[sqlite3.Connection], T]:
        """`work` after `check_embedder`, in the same transaction."""

        def run(conn: sqlite3.Connection) -> T:
            self.check_embedder(conn)
            return work(conn)

        return run

    # -- re-embedding (`_reembed.py`) ---------------------------------------------

    def reembed(
        self,
        new_embeddings: Embeddings,
        *,
        batch_size: int = DEFAULT_BATCH,
        users: Sequence[UserKey] | None = None,
        progress: ProgressCallback | None = None,
    ) -> ReembedReport:
        """Move the file to `new_embeddings` online: every memory (deleted ones too) is
        embedded into a shadow while searches use the old vectors, then one transaction
        cuts over and this service switches to the new embedder; other services refuse
        until reopened with it. Resumable: a rerun continues a killed one. `users`
        embeds only theirs (no cutover while other users' memories lack a new vector)."""
        users = [check_user(u) for u in users] if users else None
        return SQLiteReembed(self, new_embeddings, batch_size, users, progress).run()

    def reembed_plan(self, users: Sequence[UserKey] | None = None) -> ReembedPlan:
        """What `reembed` would embed: the memory texts and their estimated tokens."""
        return reembed_plan(self, [check_user(u) for u in users] if users else None)

    def store_info(self) -> StoreInfo:
        """Schema version, recorded embedder, counts, a re-embed in progress (`info`)."""
        return self._db.read(_identity.store_info)

    def _switch(self, embeddings: Embeddings, generation: int) -> None:
        """After a cutover (under the exclusive model lock): serve the new embedder."""
        self._embeddings, self._generation = embeddings, generation

    def _backfill_embeddings(self, user: UserKey, dim: int) -> None:
        """Embed live memories stored without a vector (or with another dimension)."""
        params = (user.app_name, user.user_id, dim * 4, _EMBED_BATCH)
        while True:
            rows = self._db.read(
                lambda conn: conn.execute(sql.SELECT_MISSING_VECTORS, params).fetchall()
            )
            if not rows:
                return
            blobs = self._embed([embedding_text(text) for _, text, _who in rows])
            if any(b is None or len(b) != dim * 4 for b in blobs):
                logger.warning("embedder returned vectors of another dimension; not backfilling")
                return
            updates = [
                (blob, rid, text, who) for (rid, text, who), blob in zip(rows, blobs, strict=True)
            ]
            self._db.write(self._checked(_executemany(sql.UPDATE_EMBEDDING, updates)))
            logger.info("backfilled %d embeddings for %s", len(rows), user)


def _unit_blobs(vectors: Sequence[Sequence[float]]) -> list[bytes | None]:
    """Each vector L2-normalised as a float32 blob; one numpy pass for the whole batch
    (per-vector conversion was a tenth of `add_many`'s time)."""
    try:
        matrix = np.asarray(vectors, dtype=np.float32)
    except ValueError:  # ragged: vectors of different sizes
        matrix = None
    if matrix is None or matrix.ndim != 2:
        return [to_blob(unit_vector(v)) for v in vectors]
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    matrix = np.divide(matrix, norms, out=matrix.copy(), where=norms > 0)
    return [row.tobytes() for row in matrix]


def _executemany(
    statement: str, params: list[tuple[Any, ...]]
) -> Callable[[sqlite3.Connection], object]:
    return lambda conn: conn.executemany(statement, params)
