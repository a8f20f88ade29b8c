"""The async half of `PostgresMemoryService`: an `AsyncConnectionPool` driver for the shared plans."""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar, cast

import psycopg
from pgvector.psycopg.vector import register_vector_info
from psycopg.rows import dict_row
from psycopg.types import TypeInfo
from psycopg_pool import AsyncConnectionPool

from ...service.claims import ClaimOp
from ...service.reads import ReadPlan
from ...service.steps import Plan
from . import _claims
from ._base import PostgresBase, backend_error, logger
from ._ops import Copy, Embed, Op

T = TypeVar("T")


class AsyncPostgres(PostgresBase):
    """The async driver, on a pool bound to the running loop (rebuilt if the loop changes)."""

    _async_loop: asyncio.AbstractEventLoop | None = None

    async def _apool(self) -> AsyncConnectionPool[Any]:
        loop = asyncio.get_running_loop()
        with self._pool_lock:
            pool = self._async_pool
            if pool is None or (self._owns_async and self._async_loop is not loop):
                if pool is not None:
                    logger.warning("event loop changed; opening a new async pool for this loop")
                pool = AsyncConnectionPool(**self._pool_options("langmem-trpc-async"))
                self._async_pool, self._async_loop = pool, loop
        await pool.open()
        return pool

    async def arelease_loop(self) -> None:
        """Close the async pool this service opened on the running loop, if any.

        psycopg_pool's maintenance tasks survive cancellation, so a pool left
        open when its loop shuts down can hang the loop's final cancellation.
        """
        loop = asyncio.get_running_loop()
        with self._pool_lock:
            pool = self._async_pool
            if pool is None or not self._owns_async or self._async_loop is not loop:
                return
            self._async_pool = self._async_loop = None
        await pool.close()

    async def _arun(self, op: Op) -> Any:
        plan = self._gated(op)
        try:
            pool = await self._apool()
            async with pool.connection() as conn:
                if conn not in self._prepared:
                    await conn.execute(self.session_settings(self._owns_async))
                    self._prepared.add(conn)
                cursor = conn.cursor(row_factory=dict_row)
                if op.write:
                    async with conn.transaction():
                        return await self._adrive(plan, cursor)
                return await self._adrive(plan, cursor)
        except psycopg.Error as exc:
            raise backend_error(exc) from exc

    async def _adrive(self, plan: Any, cursor: psycopg.AsyncCursor[dict[str, Any]]) -> Any:
        reply: Any = None
        try:
            while True:
                step = plan.send(reply)
                if isinstance(step, Embed):
                    reply = await self._aembed(step)
                elif isinstance(step, Copy):
                    conn = cursor.connection
                    info = self._vector_info.get(conn) or await TypeInfo.fetch(conn, "vector")
                    self._vector_info[conn] = info
                    register_vector_info(cast(Any, cursor), info)  # this cursor: numpy -> vector
                    async with cursor.copy(step.sql) as copy:
                        copy.set_types(list(step.types))
                        for row in step.rows:
                            await copy.write_row(row)
                    reply = []
                else:
                    await cursor.execute(step.sql, step.params)
                    reply = await cursor.fetchall() if cursor.description is not None else []
        except StopIteration as done:
            return done.value

    async def _aembed(self, step: Embed) -> list[list[float]]:
        assert self._embeddings is not None
        if step.query:
            return [await self._embeddings.aembed_query(text) for text in step.texts]
        return await self._embeddings.aembed_documents(step.texts)

    async def asetup(self) -> None:
        """Async twin of `setup()`."""
        self._search_cache.dims = await self._arun(self._op_setup())

    async def arun_plan(self, plan: Plan[T]) -> T:
        return cast("T", await self._arun(Op(self._write(plan), write=True)))

    async def arun_read(self, plan: ReadPlan) -> Any:
        return await self._arun(Op(self._read_statements(plan), write=False))

    async def arun_claim_op(self, op: ClaimOp[T]) -> T:
        return cast("T", await self._arun(_claims.op_for(op)))
