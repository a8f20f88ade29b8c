"""`PostgresJobQueue`: the producer side of the durable extraction queue.

Jobs live in procrastinate's tables (`setup()` creates them); `queue.worker` consumes
them. What one enqueue does is in `_plan.py`, the payload in `_payload.py`; this module
runs the plan on a connection (sync, or on a caller's async pool).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
from collections.abc import Generator, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from langchain_core.messages import BaseMessage

from ..errors import (
    BackendError,
    ConfigurationError,
    InvalidInputError,
    LangmemTrpcError,
    error_text,
)
from ..extraction.worker import check_job_input
from ..service.protocol import MemoryService
from ..service.steps import adrive, drive
from ..types import UserKey
from ._payload import MIN_PAYLOAD_BYTES, JobPayload, Merge, check_queue_name
from ._plan import (
    Collapse,
    EnqueueOutcome,
    Omit,
    PlanStep,
    ReadCursor,
    SubmitJob,
    collapse_decision,
    enqueue_plan,
)
from ._schema import migrate
from ._stats import (
    COSTS,
    COSTS_EXIST,
    COSTS_TABLE,
    FAILED_JOBS,
    RETRY_FAILED,
    STATS_QUERIES,
    TASK_NAME,
    FailedJob,
    ProducerCounters,
    QueueStats,
    queue_params,
    stats_from_rows,
)
from ._triggers import JOB_TRIGGERS

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

__all__ = ["PostgresJobQueue"]

logger = logging.getLogger(__name__)

SETUP_LOCK = 0x6C616E67  # advisory lock key of the schema setup ("lang")
WAITING_LOCK_INDEX = (
    "CREATE INDEX IF NOT EXISTS langmem_procrastinate_jobs_waiting_lock"
    " ON procrastinate_jobs (lock, id) WHERE status IN ('todo', 'doing')"
)
"""procrastinate's fetch looks for an earlier job of the same lock per candidate: with
stale statistics (a fast-grown backlog) a scan of the waiting jobs each, unless this index
serves it (docs/bench-worker.md, scenario 5; upstream procrastinate #393, #1242)."""
WAITING = "SELECT id, args FROM procrastinate_jobs WHERE queueing_lock = %s AND status = 'todo' FOR UPDATE"
REPLACE = "UPDATE procrastinate_jobs SET args = %s::jsonb WHERE id = %s RETURNING id"
"""RETURNING only so that every statement of a step answers a row (`_statements`)."""
DEFER = """SELECT unnest(procrastinate_defer_jobs_v1(ARRAY[ROW(%s, %s, 0, %s, %s, %s::jsonb, NULL)
    ::procrastinate_job_to_defer_v1])) AS id"""
"""procrastinate's own defer function (what `Task.defer` runs), with plain parameters: binding
the composite type row by row is cheaper than procrastinate's text dump of it."""


class PostgresJobQueue:
    """A durable extraction queue on PostgreSQL, built on procrastinate.

    Args:
        conninfo: the database of the queue (normally the one the memories live in).
        pool: a `psycopg_pool.ConnectionPool` (or `AsyncConnectionPool`) to use instead;
            it stays open at `close()`. With an async pool, `aenqueue` uses it natively
            and sync calls use a small pool of their own on the same conninfo.
        app_name: the `application_name` of the queue's own connections (what
            `pg_stat_activity` shows).
        queue: the queue's name; an app's jobs go to procrastinate queue `queue@app`,
            so a worker can take some apps only (`langmem-trpc worker --app`).
        max_payload_bytes: cap on one job's JSON arguments (at least 65,536); a longer delta
            is queued as consecutive jobs; a message that cannot fit in a job is queued as a
            placeholder, so the thread goes on past it without it (logged at WARNING,
            counted in `stats().oversized`; docs/operating.md, "Oversized messages").
        service: where the extraction cursors are read from when the memories do not live
            in the queue's database (default: read from the queue's database directly).
        connect_timeout: seconds to wait for a connection before an enqueue fails
            (`BackendError`; counted in `stats().producer_errors`).
        pool_size: connections of the queue's own pool (all opened at construction, in
            the background).

    A job is durable once `enqueue` returns: its transaction has committed.

    Example:
        ```python
        with PostgresJobQueue("postgresql://...") as queue:
            queue.setup()
            queue.enqueue(user, "thread-1", state["messages"])
        ```
    """

    def __init__(
        self,
        conninfo: str | None = None,
        *,
        pool: ConnectionPool[Any] | AsyncConnectionPool[Any] | None = None,
        app_name: str = "langmem",
        queue: str = "langmem",
        max_payload_bytes: int = 1_000_000,
        service: MemoryService | None = None,
        connect_timeout: float = 2.0,
        pool_size: int = 4,
    ) -> None:
        try:
            import procrastinate  # noqa: F401 - the worker side; checked here for a clear error
            from psycopg_pool import AsyncConnectionPool, ConnectionPool
        except ImportError as exc:  # pragma: no cover - the [queue] extra
            raise ConfigurationError(
                "PostgresJobQueue needs the [queue] extra: pip install 'langmem-trpc[queue]'"
            ) from exc
        from ..backends.postgres import checked_conninfo

        _check_arguments(conninfo, pool, queue, max_payload_bytes, connect_timeout, pool_size)
        if service is not None and not isinstance(service, MemoryService):
            raise ConfigurationError(
                f"service must be a MemoryService, got {type(service).__name__}"
            )
        self.app_name = app_name
        self.queue = queue
        self.max_payload_bytes = max_payload_bytes
        self.service = service
        self.connect_timeout = connect_timeout
        self._counters = ProducerCounters()
        self._async_pool: Any = pool if isinstance(pool, AsyncConnectionPool) else None
        self._owns_pool = not isinstance(pool, ConnectionPool)
        if isinstance(pool, ConnectionPool):
            self._pool: Any = pool
        else:
            target: Any = checked_conninfo(conninfo) if conninfo is not None else pool.conninfo  # type: ignore[union-attr]
            self._pool = _open_pool(target, app_name, queue, connect_timeout, pool_size)
        self._closed = False

    # -- lifecycle ----------------------------------------------------------

    def setup(self) -> None:
        """Create or migrate procrastinate's schema (`_schema.migrate`), then our index and
        triggers (`JOB_TRIGGERS`); idempotent, safe to race (an advisory lock).

        Raises `ConfigurationError` (nothing changed) for a schema it cannot place: newer
        than the installed procrastinate, or older without a recorded version."""
        with self._connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (SETUP_LOCK,))
            migrate(conn)
            conn.execute(WAITING_LOCK_INDEX)
            conn.execute(JOB_TRIGGERS)
            conn.execute(COSTS_TABLE)

    async def asetup(self) -> None:
        await asyncio.to_thread(self.setup)

    def close(self) -> None:
        """Close the pools this queue opened (a pool passed in stays open)."""
        if self._closed:
            return
        self._closed = True
        if self._owns_pool:
            self._pool.close()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    def __enter__(self) -> PostgresJobQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> PostgresJobQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- producing ----------------------------------------------------------

    def enqueue(
        self, user: UserKey, thread_id: str, messages: Sequence[BaseMessage], **_: Any
    ) -> EnqueueOutcome:
        """Queue the thread's delta since its cursor; durable once this returns.

        Raises `InvalidInputError` (nothing written) for bad input, `BackendError` when the database cannot be reached within
        `connect_timeout` (logged and counted). Extra keyword arguments of the in-process
        worker (`cancel=`) are accepted and ignored: a queued job never runs in the caller.
        """
        payload = self._payload(user, thread_id, messages)
        with self._accounted(payload):
            outcome = self._drive(payload)
        self._counters.bump(_COUNTER[outcome])
        return outcome

    async def aenqueue(
        self, user: UserKey, thread_id: str, messages: Sequence[BaseMessage]
    ) -> EnqueueOutcome:
        """`enqueue` for async callers; never blocks the event loop.

        With an `AsyncConnectionPool` it runs on it; otherwise in a worker thread.
        """
        payload = self._payload(user, thread_id, messages)
        if self._async_pool is None:
            return await asyncio.to_thread(self.enqueue, user, thread_id, payload.messages)
        with self._accounted(payload):
            outcome = await self._adrive(payload)
        self._counters.bump(_COUNTER[outcome])
        return outcome

    def stats(self, *, top: int = 20) -> QueueStats:
        """Depth (in all and per app), running, oldest waiting age, per-user lag, failed
        jobs, producer counters."""
        params = queue_params(self.queue, top=top)
        with self._connection() as conn, conn.cursor(row_factory=_dict_row()) as cur:
            rows = [cur.execute(q, params).fetchall() for q in STATS_QUERIES]
        return stats_from_rows(rows, self._counters.snapshot())

    def costs(self, *, top: int = 20) -> dict[str, dict[str, int]]:
        """What the queue's jobs cost per user ("app/user": jobs, model_calls,
        input_tokens, output_tokens), costliest first, at most `top` users; recorded by
        `QueueWorker` for jobs that called a model ({} before a `setup()` that made the table)."""
        params = queue_params(self.queue, top=top)
        with self._connection() as conn, conn.cursor(row_factory=_dict_row()) as cur:
            if not cur.execute(COSTS_EXIST).fetchone()["present"]:
                return {}
            rows = cur.execute(COSTS, params).fetchall()
        names = ("jobs", "model_calls", "input_tokens", "output_tokens")
        return {f"{r['app_name']}/{r['user_id']}": {n: int(r[n]) for n in names} for r in rows}

    def failed_jobs(self, *, limit: int = 100) -> list[FailedJob]:
        """Jobs of this queue that failed every retry (or were aborted), oldest first."""
        params = queue_params(self.queue, limit=limit)
        with self._connection() as conn, conn.cursor(row_factory=_dict_row()) as cur:
            return [FailedJob(**row) for row in cur.execute(FAILED_JOBS, params).fetchall()]

    def retry_failed(self, job_id: int) -> bool:
        """Put a failed (or aborted) job back in the queue, due now; False if there is none."""
        with self._connection() as conn, conn.transaction():
            row = conn.execute(RETRY_FAILED, queue_params(self.queue, id=job_id)).fetchone()
            return row is not None

    def counters(self) -> dict[str, int]:
        """This producer's counters without a database round trip (what `stats()` adds)."""
        return self._counters.snapshot()

    async def astats(self, *, top: int = 20) -> QueueStats:
        return await asyncio.to_thread(self.stats, top=top)

    # -- internals ----------------------------------------------------------

    def _payload(
        self, user: UserKey, thread_id: str, messages: Sequence[BaseMessage]
    ) -> JobPayload:
        try:
            return JobPayload(user, thread_id, check_job_input(user, thread_id, messages))
        except InvalidInputError:
            self._counters.bump("rejected")
            raise

    @contextmanager
    def _accounted(self, payload: JobPayload) -> Iterator[None]:
        """Count a refused or failed enqueue; a driver error becomes `BackendError`."""
        import psycopg

        try:
            yield
        except InvalidInputError:
            self._counters.bump("rejected")
            raise
        except (LangmemTrpcError, psycopg.Error) as exc:  # psycopg_pool.PoolTimeout included
            self._counters.bump("producer_errors")
            logger.warning(
                "queue: enqueue failed for %s thread %r: %s",
                payload.user,
                payload.thread_id,
                error_text(exc),
            )
            if isinstance(exc, LangmemTrpcError):  # BackendError of a service's cursor read
                raise
            detail = type(exc).__name__
            if isinstance(exc, psycopg.errors.UndefinedTable):
                detail = (
                    "a table is missing; run the queue's setup() and the memory service's "
                    "setup() on this database (or pass service=)"
                )
            raise BackendError(f"could not enqueue for {payload.user}: {detail}") from exc

    def _connection(self) -> Any:
        if self._closed:
            raise ConfigurationError("the queue is closed")
        return self._pool.connection(timeout=self.connect_timeout)

    def _drive(self, payload: JobPayload) -> EnqueueOutcome:
        """Run one enqueue plan; once more on a fresh connection when the pooled one turns
        out dead at the first statement (the server restarted since it was opened)."""
        import psycopg

        for attempt in range(2):
            with self._connection() as conn:
                ran: list[PlanStep] = []

                def execute(step: PlanStep) -> Any:
                    value = self._step(conn, step)
                    ran.append(step)  # noqa: B023 - called within this iteration only
                    return value

                try:
                    return drive(enqueue_plan(self.queue, payload, self.max_payload_bytes), execute)
                except psycopg.OperationalError:
                    if ran or attempt or not conn.broken:
                        raise
                    logger.info("queue: a pooled connection was dead; enqueueing on a new one")
            self._pool.check()  # drop the other dead idle connections too
        raise AssertionError("unreachable")

    async def _adrive(self, payload: JobPayload) -> EnqueueOutcome:
        """`_drive` on the caller's async pool."""
        import psycopg

        for attempt in range(2):
            async with self._async_pool.connection(timeout=self.connect_timeout) as conn:
                ran: list[PlanStep] = []

                async def execute(step: PlanStep) -> Any:
                    value = await self._astep(conn, step)
                    ran.append(step)  # noqa: B023 - called within this iteration only
                    return value

                try:
                    plan = enqueue_plan(self.queue, payload, self.max_payload_bytes)
                    return await adrive(plan, execute)
                except psycopg.OperationalError:
                    if ran or attempt or not conn.broken:
                        raise
                    logger.info("queue: a pooled connection was dead; enqueueing on a new one")
            await self._async_pool.check()  # drop the other dead idle connections too
        raise AssertionError("unreachable")

    def _omitted(self, step: Omit) -> None:
        """Log and count each message queued as a placeholder (`_payload.placeholder`)."""
        for item in step.omitted:
            self._counters.bump("oversized")
            logger.warning(
                "queue: message %d (id %r, %d bytes of JSON) of %s thread %r is over "
                "max_payload_bytes (%d): queued as a placeholder, it will not be extracted",
                item.index,
                item.message_id,
                item.size,
                step.user,
                step.thread_id,
                step.cap,
            )

    def _step(self, conn: Any, step: PlanStep) -> Any:
        if isinstance(step, Omit):
            return self._omitted(step)
        if isinstance(step, ReadCursor) and self.service is not None:
            return self.service.get_cursor(step.user, step.thread_id)
        try:
            with _scope(conn, step), conn.cursor(row_factory=_dict_row()) as cur:
                return drive(_statements(step), lambda query: cur.execute(*query).fetchone())
        except Exception as exc:
            return _lock_taken(exc)

    async def _astep(self, conn: Any, step: PlanStep) -> Any:
        if isinstance(step, Omit):
            return self._omitted(step)
        if isinstance(step, ReadCursor) and self.service is not None:
            return await self.service.aget_cursor(step.user, step.thread_id)
        try:
            async with _scope(conn, step), conn.cursor(row_factory=_dict_row()) as cur:
                return await adrive(_statements(step), functools.partial(_afetchone, cur))
        except Exception as exc:
            return _lock_taken(exc)


def _statements(step: ReadCursor | SubmitJob | Collapse) -> Generator[tuple[str, Any], Any, Any]:
    """A step's SQL, sans-I/O like the plan, so the sync and async drivers only run it: it
    yields (statement, parameters), is sent the statement's first row (a dict, or None) and
    returns the step's answer."""
    if isinstance(step, ReadCursor):
        from ..backends.postgres import read_cursor

        return (yield from read_cursor(step.user, step.thread_id))
    if isinstance(step, SubmitJob):
        yield DEFER, (step.queue_name, TASK_NAME, step.lock, step.queueing_lock, step.args)
        return True  # a queueing-lock conflict raises: `_lock_taken`
    waiting = yield WAITING, (step.queueing_lock,)
    decision = collapse_decision(step, waiting)
    if decision == Merge.REPLACE:
        yield REPLACE, (step.args, waiting["id"])
    return decision


def _dict_row() -> Any:
    from psycopg.rows import dict_row

    return dict_row


async def _afetchone(cur: Any, query: tuple[str, Any]) -> Any:
    return await (await cur.execute(*query)).fetchone()


def _scope(conn: Any, step: PlanStep) -> Any:
    """`Collapse` runs in a transaction (it locks the waiting job), a cursor read in none.
    A defer is one statement: no transaction in autocommit, a savepoint in a caller's pool
    transaction, so a queueing-lock conflict leaves that transaction usable. Sync or async:
    both `transaction()` and `nullcontext` are."""
    if isinstance(step, Collapse) or (isinstance(step, SubmitJob) and not conn.autocommit):
        return conn.transaction()
    return nullcontext()


def _lock_taken(exc: Exception) -> bool:
    """False for the thread's queueing lock being taken (a job of it waits, on a defer);
    else re-raise."""
    from procrastinate.manager import QUEUEING_LOCK_CONSTRAINT
    from psycopg.errors import UniqueViolation

    if isinstance(exc, UniqueViolation) and exc.diag.constraint_name == QUEUEING_LOCK_CONSTRAINT:
        return False
    raise exc


_COUNTER = {
    EnqueueOutcome.QUEUED: "enqueued",
    EnqueueOutcome.COLLAPSED: "collapsed",
    EnqueueOutcome.NOTHING_NEW: "nothing_new",
}


def _check_arguments(
    conninfo: str | None,
    pool: object,
    queue: str,
    max_payload_bytes: int,
    connect_timeout: float,
    pool_size: int,
) -> None:
    """`PostgresJobQueue`'s arguments, each refused with a `ConfigurationError` naming it."""
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

    if (conninfo is None) == (pool is None):
        raise ConfigurationError("PostgresJobQueue needs exactly one of conninfo or pool")
    if pool is not None and not isinstance(pool, (ConnectionPool, AsyncConnectionPool)):
        raise ConfigurationError(
            f"pool must be a psycopg_pool ConnectionPool or AsyncConnectionPool, "
            f"not {type(pool).__name__}"
        )
    check_queue_name(queue)
    if max_payload_bytes < MIN_PAYLOAD_BYTES:
        raise ConfigurationError(f"max_payload_bytes must be >= {MIN_PAYLOAD_BYTES}")
    if connect_timeout <= 0 or pool_size < 1:
        raise ConfigurationError("connect_timeout must be > 0 and pool_size >= 1")


def _open_pool(
    target: Any, app_name: str, queue: str, connect_timeout: float, pool_size: int
) -> ConnectionPool[Any]:
    """The queue's own sync pool, opening in the background (not by a burst of enqueues)."""
    from psycopg_pool import ConnectionPool

    pool: ConnectionPool[Any] = ConnectionPool(
        target,
        min_size=pool_size,
        max_size=pool_size,
        timeout=connect_timeout,
        kwargs={
            "autocommit": True,
            "connect_timeout": max(1, math.ceil(connect_timeout)),
            "application_name": app_name,
        },
        open=False,
        name=f"langmem-queue-{queue}",
    )
    pool.open(wait=False)
    return pool
