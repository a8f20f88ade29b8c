"""The blocking half of `PostgresMemoryService`: a `ConnectionPool` driver for the shared plans."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import psycopg
from pgvector.psycopg.vector import register_vector_info
from psycopg.rows import dict_row
from psycopg.types import TypeInfo
from psycopg_pool import ConnectionPool

from ...service.claims import ClaimOp
from ...service.info import StoreInfo
from ...service.reads import ReadPlan
from ...service.reembed import (
    DEFAULT_BATCH,
    ProgressCallback,
    ReembedInThread,
    ReembedPlan,
    ReembedReport,
)
from ...service.rules import check_user
from ...service.steps import Plan
from ...types import UserKey
from . import _claims, _identity
from ._base import PostgresBase, backend_error, logger
from ._ops import Copy, Embed, Op
from ._reembed import PostgresReembed, plan_texts

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

T = TypeVar("T")


class SyncPostgres(ReembedInThread, PostgresBase):
    """The sync driver, on its own pool: a sync call on an event-loop thread cannot deadlock."""

    def _pool(self) -> ConnectionPool[Any]:
        with self._pool_lock:
            if self._sync_pool is None:
                pool: ConnectionPool[Any] = ConnectionPool(**self._pool_options("langmem-trpc"))
                pool.open(wait=True, timeout=self._pool_timeout)
                self._sync_pool = pool
            return self._sync_pool

    def _run(self, op: Op) -> Any:
        with self._model_lock.shared():  # one embedder per operation across a cutover
            return self._run_op(op)

    def _run_op(self, op: Op) -> Any:
        plan = self._gated(op)
        try:
            with self._pool().connection() as conn:
                if conn not in self._prepared:
                    conn.execute(self.session_settings(self._owns_sync))
                    self._prepared.add(conn)
                cursor = conn.cursor(row_factory=dict_row)
                if op.write:
                    with conn.transaction():
                        return self._drive(plan, cursor)
                return self._drive(plan, cursor)
        except psycopg.Error as exc:
            raise backend_error(exc) from exc

    def _drive(self, plan: Any, cursor: psycopg.Cursor[dict[str, Any]]) -> Any:
        reply: Any = None
        try:
            while True:
                step = plan.send(reply)
                if isinstance(step, Embed):
                    reply = self._embed(step)
                elif isinstance(step, Copy):
                    conn = cursor.connection
                    info = self._vector_info.get(conn) or TypeInfo.fetch(conn, "vector")
                    self._vector_info[conn] = info
                    register_vector_info(cast(Any, cursor), info)  # this cursor: numpy -> vector
                    with cursor.copy(step.sql) as copy:
                        copy.set_types(list(step.types))
                        for row in step.rows:
                            copy.write_row(row)
                    reply = []
                else:
                    cursor.execute(step.sql, step.params)
                    reply = cursor.fetchall() if cursor.description is not None else []
        except StopIteration as done:
            return done.value

    def _embed(self, step: Embed) -> list[list[float]]:
        assert self._embeddings is not None
        if step.query:
            return [self._embeddings.embed_query(text) for text in step.texts]
        return self._embeddings.embed_documents(step.texts)

    def setup(self) -> None:
        """Create the extension and apply pending migrations (idempotent; safe to run concurrently)."""
        self._search_cache.dims = self._run(self._op_setup())
        logger.debug("langmem_trpc PostgreSQL schema ready (dims=%s)", self._search_cache.dims)

    def reembed(
        self,
        new_embeddings: Embeddings,
        *,
        batch_size: int = DEFAULT_BATCH,
        users: Sequence[UserKey] | None = None,
        progress: ProgressCallback | None = None,
    ) -> ReembedReport:
        """Move the database to `new_embeddings` online (`_reembed.py`): a shadow column
        filled batch by batch (resumable), its HNSW index built concurrently, then one
        cutover transaction; this service switches to the new embedder, others refuse
        until reopened with it. `users` embeds only theirs (no cutover until all are)."""
        users = [check_user(u) for u in users] if users else None
        return PostgresReembed(self, new_embeddings, batch_size, users, progress).run()

    def reembed_plan(self, users: Sequence[UserKey] | None = None) -> ReembedPlan:
        """What `reembed` would embed: the memory texts and their estimated tokens."""
        chosen = [check_user(u) for u in users] if users else None
        return cast("ReembedPlan", self._run(Op(plan_texts(chosen), write=False)))

    def store_info(self) -> StoreInfo:
        """Schema version, recorded embedder and counts (`langmem-trpc info`)."""
        return cast("StoreInfo", self._run(Op(_identity.store_info(), write=False)))

    def run_plan(self, plan: Plan[T]) -> T:
        return cast("T", self._run(Op(self._write(plan), write=True)))

    def run_read(self, plan: ReadPlan) -> Any:
        return self._run(Op(self._read_statements(plan), write=False))

    def run_claim_op(self, op: ClaimOp[T]) -> T:
        return cast("T", self._run(_claims.op_for(op)))
