"""`PostgresMemoryService`: PostgreSQL + pgvector backend, one class with sync and async methods."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime
from typing import Any, TypeVar, cast

from ...errors import InvalidMemoryError
from ...service import plans as write_plans
from ...service.capabilities import Capability
from ...service.protocol import MemoryService
from ...service.rules import check_user
from ...types import Entry, Memory, Source, UserKey
from . import _bulk
from ._ops import Op, Plan
from .aio import AsyncPostgres
from .sync import SyncPostgres

__all__ = ["PostgresMemoryService"]

T = TypeVar("T")


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
        entry_cache_size: search candidates' entries kept per process (by row
            version, so never stale); size it to the rows hot users' searches touch
            (0 turns the cache off).
        language: the tokenizer's language (a Snowball name such as "german", or a
            `Language`; English by default). `setup()` on a new database records it;
            a database recorded under another language raises `ConfigurationError`
            (at `setup()`, or at this service's first operation).

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

    # -- expiry (the reads are `MemoryService`'s, run by `run_read`) --------------

    def _query(self, plan: Plan[T], write: bool = False) -> T:
        """Run `plan` (built, so validated, by the caller); a read runs without a transaction."""
        return cast("T", self._run(Op(plan, write)))

    async def _aquery(self, plan: Plan[T], write: bool = False) -> T:
        """Async twin of `_query`."""
        return cast("T", await self._arun(Op(plan, write)))

    def set_expiry(self, user: UserKey, memory_id: str, expires_at: datetime | str | None) -> bool:
        """See `MemoryService.set_expiry`."""
        return self._query(self._set_expiry(user, memory_id, expires_at), write=True)

    async def aset_expiry(
        self, user: UserKey, memory_id: str, expires_at: datetime | str | None
    ) -> bool:
        """Async twin of `set_expiry`."""
        return await self._aquery(self._set_expiry(user, memory_id, expires_at), write=True)

    def expired(self, user: UserKey, limit: int | None = None) -> list[str]:
        """See `MemoryService.expired`."""
        return self._query(self._expired(user, limit))

    async def aexpired(self, user: UserKey, limit: int | None = None) -> list[str]:
        """Async twin of `expired`."""
        return await self._aquery(self._expired(user, limit))

    # -- bulk load -----------------------------------------------------------

    def add_many(
        self,
        user: UserKey,
        items: Sequence[str | Memory],
        *,
        source: Source | None = None,
        vectors: Sequence[Sequence[float]] | None = None,
        defer_index: bool = False,
    ) -> list[Entry]:
        """`add` of each item, in one transaction (see `MemoryService.add_many`); runs of
        new content are stored with one binary COPY. `vectors`: precomputed embeddings in
        the items' order (the embedder is not called; without them it runs once).

        `defer_index=True` (bulk imports) keeps those runs out of the HNSW graph, most of
        a load's cost, until `index_pending()`; they are searchable at once (an exact scan
        of the user's pending rows). Other users' searches are unaffected.
        """
        plan = self._add_many_plan(user, items, source, vectors, defer_index)
        return self._query(plan, write=True)

    async def aadd_many(
        self,
        user: UserKey,
        items: Sequence[str | Memory],
        *,
        source: Source | None = None,
        vectors: Sequence[Sequence[float]] | None = None,
        defer_index: bool = False,
    ) -> list[Entry]:
        """Async twin of `add_many`."""
        plan = self._add_many_plan(user, items, source, vectors, defer_index)
        return await self._aquery(plan, write=True)

    def _add_many_plan(
        self,
        user: UserKey,
        items: Sequence[str | Memory],
        source: Source | None,
        vectors: Sequence[Sequence[float]] | None,
        defer_index: bool,
    ) -> Plan[list[Entry]]:
        plan = write_plans.add_many(user, items, limits=self._limits, source=source)
        if vectors is not None:
            if self._embeddings is None:
                raise InvalidMemoryError(
                    "vectors", "given, but the service has no embedder (keyword-only)"
                )
            if len(vectors) != len(items):
                raise InvalidMemoryError(
                    "vectors", f"has {len(vectors)} items for {len(items)} memories"
                )
        return self._write(plan, vectors, indexed=not defer_index)

    def index_pending(self, user: UserKey | None = None, *, batch_size: int = 2_000) -> int:
        """Add deferred rows (`add_many(defer_index=True)`) to the HNSW index; returns how many.

        Runs batch by batch, each its own transaction, until none is left (of
        `user`, or of every user). Safe to run while others read and write.
        """
        scope = self._pending_scope(user, batch_size)
        done = 0
        while n := len(self._run(_bulk.pending_op(scope, batch_size))):
            done += n
        return done

    async def aindex_pending(self, user: UserKey | None = None, *, batch_size: int = 2_000) -> int:
        """Async twin of `index_pending`."""
        scope = self._pending_scope(user, batch_size)
        done = 0
        while n := len(await self._arun(_bulk.pending_op(scope, batch_size))):
            done += n
        return done

    def pending_count(self, user: UserKey | None = None) -> int:
        """Live rows not yet in the HNSW index (of `user`, or of every user)."""
        return int(self._run(_bulk.pending_count_op(self._pending_scope(user, 1)))[0]["n"])

    async def apending_count(self, user: UserKey | None = None) -> int:
        """Async twin of `pending_count`."""
        rows = await self._arun(_bulk.pending_count_op(self._pending_scope(user, 1)))
        return int(rows[0]["n"])

    @staticmethod
    def _pending_scope(user: UserKey | None, batch_size: int) -> UserKey | None:
        if batch_size < 1:
            raise InvalidMemoryError("batch_size", "must be >= 1")
        return None if user is None else check_user(user)

    # -- lifecycle -------------------------------------------------------------

    @property
    def capabilities(self) -> frozenset[Capability]:
        """DURABLE, CROSS_PROCESS and DEFERRED_INDEXING (`add_many(defer_index=True)`);
        VECTORS with an embedder."""
        found = {Capability.DURABLE, Capability.CROSS_PROCESS, Capability.DEFERRED_INDEXING}
        if self._embeddings is not None:
            found.add(Capability.VECTORS)
        return frozenset(found)

    def close(self) -> None:
        """Close the pools this service opened (pools passed in stay open) and drop the
        search caches (entries, user sizes, time mentions)."""
        self._search_cache.clear()
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
        return f"PostgresMemoryService(vectors={self.supports_vectors}, dims={self._search_cache.dims})"
