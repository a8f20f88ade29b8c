"""`PostgresMemoryService`: PostgreSQL + pgvector backend, one class with sync and async methods."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from ...service.protocol import MemoryService
from ...types import Memory, Source, UserKey
from . import _bulk
from .aio import AsyncPostgres
from .sync import SyncPostgres

__all__ = ["PostgresMemoryService"]


class PostgresMemoryService(SyncPostgres, AsyncPostgres, MemoryService):
    """Durable per-user memory on PostgreSQL with pgvector: hybrid search in one SQL statement.

    Sync methods use a `psycopg_pool.ConnectionPool` and the `a*` twins an
    `AsyncConnectionPool`, each opened on first use (both built from the same
    connection string, or from the pool you pass). Call `setup()` once per
    database to create the extension and apply migrations.

    Args:
        conninfo_or_pool: libpq connection string, or an existing (sync or async) pool.
        embeddings: any LangChain `Embeddings`; without one, search is keyword-only.
        limits: text, topic and capacity limits (see `Limits`).
        dims: embedding dimension; probed from the embedder at `setup()` when omitted.
        pool_size: maximum connections of each pool this service opens.
        pool_timeout: seconds to wait for a connection before failing with
            `BackendError` (an outage fails fast instead of after 30 s).
        ef_search: HNSW candidate list size (recall vs latency for big users).
        exact_search_max: users with at most this many live memories get exact
            vector search (btree + sort) instead of the HNSW index.

    Example:
        ```python
        with PostgresMemoryService.from_conn_string(url, embeddings=emb) as svc:
            svc.setup()
            svc.add(UserKey("app", "alice"), "Prefers dark mode")
        ```
    """

    @classmethod
    @contextmanager
    def from_conn_string(
        cls, conninfo: str, embeddings: Any = None, **kwargs: Any
    ) -> Iterator[PostgresMemoryService]:
        """A service whose pools are closed when the block exits."""
        service = cls(conninfo, embeddings, **kwargs)
        try:
            yield service
        finally:
            service.close()

    @classmethod
    @asynccontextmanager
    async def afrom_conn_string(
        cls, conninfo: str, embeddings: Any = None, **kwargs: Any
    ) -> AsyncIterator[PostgresMemoryService]:
        """Async twin of `from_conn_string`."""
        service = cls(conninfo, embeddings, **kwargs)
        try:
            yield service
        finally:
            await service.aclose()

    # -- bulk load -----------------------------------------------------------

    def add_many(
        self,
        user: UserKey,
        memories: Sequence[str | Memory],
        *,
        vectors: Sequence[Sequence[float]] | None = None,
        source: Source | None = None,
    ) -> int:
        """Bulk-insert validated memories in one statement; returns how many were new.

        Idempotent like `add` (content already live is skipped, not merged).
        `vectors` are precomputed embeddings in the same order; without them
        the embedder runs once for the whole batch. Raises
        CapacityExceededError, writing nothing, when the batch would exceed capacity.
        """
        batch = _bulk.prepare(user, memories, vectors, self._embeddings is not None, self._limits)
        if vectors is None and self._embeddings is not None and batch.texts:
            batch = batch.with_vectors(self._embeddings.embed_documents(batch.texts))
        result: int = self._run(_bulk.op(batch, source, self._limits))
        return result

    async def aadd_many(
        self,
        user: UserKey,
        memories: Sequence[str | Memory],
        *,
        vectors: Sequence[Sequence[float]] | None = None,
        source: Source | None = None,
    ) -> int:
        """Async twin of `add_many`."""
        batch = _bulk.prepare(user, memories, vectors, self._embeddings is not None, self._limits)
        if vectors is None and self._embeddings is not None and batch.texts:
            batch = batch.with_vectors(await self._embeddings.aembed_documents(batch.texts))
        result: int = await self._arun(_bulk.op(batch, source, self._limits))
        return result

    # -- lifecycle -------------------------------------------------------------

    def close(self) -> None:
        """Close the pools this service opened; pools passed in stay open."""
        with self._pool_lock:
            sync_pool = self._sync_pool if self._owns_sync else None
            async_pool = self._async_pool if self._owns_async else None
            loop = self._async_loop
            if self._owns_sync:
                self._sync_pool = None
            if self._owns_async:
                self._async_pool = self._async_loop = None
        if sync_pool is not None:
            sync_pool.close()
        if async_pool is None or loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            loop.create_task(async_pool.close())
        elif loop.is_running():
            asyncio.run_coroutine_threadsafe(async_pool.close(), loop)
        else:
            loop.run_until_complete(async_pool.close())

    async def aclose(self) -> None:
        """Close both pools without blocking the loop."""
        with self._pool_lock:
            async_pool = self._async_pool if self._owns_async else None
            if self._owns_async:
                self._async_pool = self._async_loop = None
        if async_pool is not None:
            await async_pool.close()
        await asyncio.to_thread(self.close)

    def __repr__(self) -> str:
        return f"PostgresMemoryService(vectors={self.supports_vectors}, dims={self._dims})"
