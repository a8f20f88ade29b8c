"""`QueueWorker`: the consumer of `PostgresJobQueue`, run by `langmem-trpc worker`.

A procrastinate worker fetches the jobs of one queue (every app's, or `apps`' only:
an app's jobs are in procrastinate queue `queue@app`) and runs each through
`AutoMemoryWorker.process` (`run_job`: checkers, policy, reconcile, the cursor
compare-and-set under the thread's claim, dead letters) in a thread of its pool.
procrastinate's lock on (queue, app, user) runs one user's jobs one at a time, oldest
first, across every worker process. What this module adds (docs/operating.md,
"Running workers as a service", has the operator's view):

- **Retries** with backoff for a FAILED or PARTIAL job; a bad payload is not retried.
- **Graceful stop**: stop fetching, put back the jobs fetched ahead, wait up to
  `shutdown_timeout` for the running ones, then put those back (a re-run skips what
  they finished, by the cursor).
- **Crash safety**: procrastinate leaves a dead worker's running jobs `doing`; a live
  worker puts them back (`recover_stalled`).
- **Outages**: reconnect (1 s doubling to 30 s) when procrastinate's worker stops or
  fails to start.

It needs `PostgresJobQueue.setup()`'s triggers (`_triggers.JOB_TRIGGERS`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from ..errors import ConfigurationError, InvalidInputError, LangmemTrpcError, error_text
from ..extraction.checkers import Checker
from ..extraction.extractor import Extractor
from ..extraction.job import JobReport, JobStatus
from ..extraction.stats import WorkerStats
from ..extraction.worker import AutoMemoryWorker
from ..service.protocol import MemoryService
from ..types import check_identifier
from ._payload import app_queue, check_queue_name, decode
from ._stats import RECORD_COST, TASK_NAME

__all__ = ["JobIncompleteError", "QueueWorker"]

logger = logging.getLogger(__name__)

READY = """SELECT EXISTS (SELECT 1 FROM procrastinate_jobs WHERE queue_name = ANY(%(queues)s)
    AND status = 'todo' AND (scheduled_at IS NULL OR scheduled_at <= now())) AS ready"""
APP_QUEUES = """SELECT DISTINCT queue_name FROM procrastinate_jobs
    WHERE starts_with(queue_name, %(apps)s) AND status IN ('todo', 'doing') ORDER BY 1"""
MAX_BACKOFF = 300.0
RECONNECT_MAX = 30.0
DISCOVER_EVERY = 1.0
"""Seconds between two app-queue lookups of a default worker with no job notification."""
DISCOVER_GAP = 0.05
"""Seconds between two app-queue lookups of a default worker while jobs keep coming."""
AHEAD = 4
"""One job fetched ahead per `AHEAD` threads (at least one): it waits for a free thread, so a
thread that ends a job starts the next at once instead of after the finish and the fetch."""


class JobIncompleteError(LangmemTrpcError):
    """A queued job did not finish its delta (failed, or timed out part way): it is retried."""


def _retry_strategy(retries: int, wait: float) -> Any:
    from procrastinate.retry import BaseRetryStrategy, RetryDecision

    class Backoff(BaseRetryStrategy):
        def get_retry_decision(self, *, exception: BaseException, job: Any) -> Any:
            if isinstance(exception, InvalidInputError):  # a bad payload stays bad
                return None
            if isinstance(exception, asyncio.CancelledError):  # aborted at shutdown
                return RetryDecision(retry_in={"seconds": 0})
            if job.attempts >= retries:
                return None
            return RetryDecision(retry_in={"seconds": min(MAX_BACKOFF, wait * 2**job.attempts)})

    return Backoff()


def _check_settings(
    queue: str,
    apps: Sequence[str] | None,
    concurrency: int,
    retries: int | None,
    retry_wait: float,
    stalled_after: float,
    poll_interval: float,
) -> None:
    """`QueueWorker`'s arguments, refused with `ConfigurationError` before anything starts."""
    if concurrency < 1:
        raise ConfigurationError("concurrency must be >= 1")
    check_queue_name(queue)
    for app in apps or ():
        check_identifier("apps", app)
    if stalled_after <= 0 or retry_wait < 0 or poll_interval <= 0:
        raise ConfigurationError("stalled_after and poll_interval must be > 0, retry_wait >= 0")
    if retries is not None and retries < 0:
        raise ConfigurationError("retries must be >= 0")


class QueueWorker:
    """Consumes one queue of `PostgresJobQueue` (see the module docstring).

    Args:
        conninfo: the queue's database.
        service: where memories and cursors live (usually the same database).
        extractor: `LLMExtractor(model)`, `VerbatimExtractor()` or any `Extractor`.
        queue: the queue name the producers use.
        apps: take only these apps' jobs (procrastinate queues `queue@app`); default: every
            app's, looked up among the unfinished jobs (`_discover_loop`; no restart).
        concurrency: jobs run at once by this process.
        job_timeout, checkers, policy, batch_messages, max_attempts, claim_ttl,
            max_calls_per_user: as for `AutoMemoryWorker`.
        retries: procrastinate attempts of one job before it is marked failed
            (default: `max_attempts + 2`); keep it above `max_attempts`, after which
            `run_job` dead-letters the batch and the job succeeds.
        retry_wait: first backoff in seconds; doubles per attempt (at most 300 s).
        stalled_after: seconds without heartbeat after which another worker's running
            jobs are put back in the queue.
        heartbeat: seconds between heartbeats (default: `stalled_after / 3`, at most 10).
        shutdown_timeout: seconds a stop waits for running jobs (default job_timeout + 10).
        poll_interval: seconds between polls when no notification arrives.
        on_ready: called (no arguments) each time the worker is registered and fetching.
        delete_succeeded: delete a job's row once it succeeded (`stats().succeeded` then
            stays 0); failed jobs are always kept for `jobs failed` / `jobs retry`.
    """

    def __init__(
        self,
        conninfo: str,
        service: MemoryService,
        extractor: Extractor,
        *,
        queue: str = "langmem",
        apps: Sequence[str] | None = None,
        concurrency: int = 4,
        job_timeout: float | None = 30.0,
        checkers: Sequence[Checker] | None = None,
        policy: str = "merge_similar",
        batch_messages: int = 50,
        max_attempts: int = 3,
        claim_ttl: float | None = None,
        max_calls_per_user: int = 4,
        retries: int | None = None,
        retry_wait: float = 2.0,
        stalled_after: float = 30.0,
        heartbeat: float | None = None,
        shutdown_timeout: float | None = None,
        poll_interval: float = 5.0,
        name: str | None = None,
        on_ready: Callable[[], None] | None = None,
        delete_succeeded: bool = False,
    ) -> None:
        _check_settings(queue, apps, concurrency, retries, retry_wait, stalled_after, poll_interval)
        self.processor = AutoMemoryWorker(
            service,
            extractor,
            checkers=checkers,
            job_timeout=job_timeout,
            batch_messages=batch_messages,
            policy=policy,
            max_attempts=max_attempts,
            claim_ttl=claim_ttl,
            max_calls_per_user=max_calls_per_user,
        )
        # The producer read the cursor at enqueue: a job claims its thread at once.
        self.processor.settings = replace(self.processor.settings, peek_cursor=False)
        self.conninfo = conninfo
        self.queue = queue
        self.apps = tuple(apps or ())
        self._queues: list[str] = [app_queue(queue, app) for app in self.apps] or [queue]
        """What procrastinate's worker fetches from; a default worker's grows in place."""
        self.concurrency = concurrency
        self.retries = max_attempts + 2 if retries is None else retries
        self.stalled_after = stalled_after
        self.heartbeat = heartbeat if heartbeat is not None else min(10.0, stalled_after / 3)
        if shutdown_timeout is None and job_timeout is not None:
            shutdown_timeout = job_timeout + 10.0
        self.shutdown_timeout = shutdown_timeout
        self.poll_interval = poll_interval
        self.name = name or f"langmem-{queue}"
        self.on_ready = on_ready
        self.delete_succeeded = delete_succeeded
        self.app = self._make_app(retry_wait)
        self._init_run_state()

    def _init_run_state(self) -> None:
        """What a running worker fills in (`run`): none of it exists before."""
        self._executor: ThreadPoolExecutor | None = None
        self._threads: asyncio.Semaphore | None = None
        self._waiting: set[asyncio.Task[Any]] = set()  # fetched ahead, waiting for a thread
        self._stopping = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._worker: Any = None
        self._wake: asyncio.Event | None = None
        self._notified: asyncio.Event | None = None
        self.recovered = 0
        """Jobs of stalled workers this worker put back in the queue."""
        self._running: set[int] = set()
        """Ids of the jobs running in this process (whatever worker id fetched them)."""

    # -- building -------------------------------------------------------------

    def _make_app(self, retry_wait: float) -> Any:
        try:
            from procrastinate import App, PsycopgConnector
        except ImportError as exc:  # pragma: no cover - the [queue] extra
            raise ConfigurationError(
                "QueueWorker needs the [queue] extra: pip install 'langmem-trpc[queue]'"
            ) from exc
        connector = PsycopgConnector(
            conninfo=self.conninfo,
            min_size=1,
            max_size=self.concurrency + 4,
            timeout=10.0,
            kwargs={"connect_timeout": 5},
            configure=_autocommit,
        )
        app = App(connector=connector)
        app.task(
            name=TASK_NAME,
            queue=self.queue,
            pass_context=True,
            retry=_retry_strategy(self.retries, retry_wait),
        )(self._run_job)
        return app

    async def _run_job(self, context: Any, /, **args: Any) -> str:
        """The procrastinate task: one queued job through `run_job`."""
        job_id, task = context.job.id, asyncio.current_task()
        self._running.add(job_id)
        try:
            payload = decode(args)
            assert self._executor is not None and self._threads is not None and task is not None
            self._waiting.add(task)  # a stop cancels it: back to the queue at once (retry 0 s)
            async with self._threads:
                self._waiting.discard(task)
                report: JobReport = await asyncio.get_running_loop().run_in_executor(
                    self._executor,
                    functools.partial(self.processor.process, offset=payload.offset),
                    payload.user,
                    payload.thread_id,
                    payload.messages,
                )
        finally:
            self._running.discard(job_id)
            self._waiting.discard(task)
        await self._record_cost(report)
        if report.status in (JobStatus.FAILED, JobStatus.PARTIAL):
            raise JobIncompleteError(f"{report.status.value}: {report.error}")
        return str(report.status.value)

    async def _record_cost(self, report: JobReport) -> None:
        """Add a job's model calls and tokens to its user's row (`jobs status` shows them);
        a job without model calls writes nothing, a failed write is only logged."""
        if not report.model_calls:
            return
        params = {
            "queue": self.queue,
            "app": report.user.app_name,
            "user": report.user.user_id,
            "calls": report.model_calls,
            "input": report.input_tokens,
            "output": report.output_tokens,
        }
        try:
            await self.app.connector.execute_query_async(RECORD_COST, **params)
        except Exception as exc:  # accounting never fails a job
            logger.warning("queue: could not record the job's cost: %s", error_text(exc))

    # -- running --------------------------------------------------------------

    def run(self, *, drain: bool = False) -> None:
        """Run until SIGTERM / SIGINT or `stop()`; blocks (its own event loop).
        `drain=True`: return once no job is ready to run (for scripts and tests)."""
        signals = threading.current_thread() is threading.main_thread()
        asyncio.run(self._main(signals=signals, drain=drain))

    async def arun(self, *, drain: bool = False) -> None:
        """Run in the caller's event loop until `stop()` (no signal handlers)."""
        await self._main(signals=False, drain=drain)

    def stop(self) -> None:
        """Stop fetching; running jobs finish (or are put back after `shutdown_timeout`)."""
        self._stopping.set()
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._stop_in_loop)

    def stats(self) -> WorkerStats:
        """The job counters of this worker process (`AutoMemoryWorker.stats()`)."""
        return self.processor.stats()

    def _stop_in_loop(self) -> None:
        if self._worker is not None:
            self._worker.stop()
        for event in (self._wake, self._notified):
            if event is not None:
                event.set()
        for task in self._waiting:  # fetched ahead, not started
            task.cancel()

    async def _main(self, *, signals: bool, drain: bool) -> None:
        self._stopping.clear()
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._executor = ThreadPoolExecutor(self.concurrency, thread_name_prefix="langmem-queue")
        self._threads = asyncio.Semaphore(self.concurrency)
        if signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._loop.add_signal_handler(sig, self.stop)
        recover = asyncio.gather(
            self._recover_loop(), self._discover_loop(), return_exceptions=True
        )
        try:
            await self._serve(drain)
        finally:
            self._stopping.set()
            self._wake.set()
            await asyncio.gather(recover, return_exceptions=True)
            if signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    self._loop.remove_signal_handler(sig)
            self._executor.shutdown(wait=True)
            self.processor.close()
            self._loop = None

    async def _run_worker(self, drain: bool) -> None:
        """One procrastinate worker on the open app, until it stops."""
        from procrastinate import worker as worker_module

        options: dict[str, Any] = dict(
            app=self.app,
            queues=await self._fetch_queues(),  # the list itself: a default worker's grows
            name=self.name,
            concurrency=self.concurrency + max(1, self.concurrency // AHEAD),
            wait=not drain,
            fetch_job_polling_interval=self.poll_interval,
            abort_job_polling_interval=self.poll_interval,
            shutdown_graceful_timeout=self.shutdown_timeout,
            install_signal_handlers=False,
            update_heartbeat_interval=self.heartbeat,
            stalled_worker_timeout=self.stalled_after,
            delete_jobs="successful" if self.delete_succeeded else "never",
        )
        notified = None if self.apps else self._job_notified
        self._worker = _worker_class(worker_module)(self._ready, notified, **options)
        if not self._stopping.is_set():
            await self._worker.run()

    async def _serve(self, drain: bool) -> None:
        """Run procrastinate's worker; reconnect with backoff when the database fails."""
        backoff = 1.0
        while not self._stopping.is_set():
            try:
                async with self.app.open_async():
                    await self._run_worker(drain)
                backoff = 1.0
                if drain:
                    if not await self._ready_jobs():
                        return
                    await self._sleep(0.1)  # jobs waiting on a lock another worker holds
                    continue
            except Exception as exc:
                if self._stopping.is_set():
                    return
                logger.warning(
                    "queue worker: database error (%s); reconnecting in %.0f s",
                    error_text(exc),
                    backoff,
                )
            finally:
                self._worker = None
            if not self._stopping.is_set():
                await self._sleep(backoff)
                backoff = min(RECONNECT_MAX, backoff * 2)

    async def _ready_jobs(self) -> bool:
        """Whether a job of the queue is waiting and due (drain mode runs until none is)."""
        async with self.app.open_async():
            queues = await self._fetch_queues()
            row = await self.app.connector.execute_query_one_async(READY, queues=queues)
        return bool(row["ready"])

    async def _fetch_queues(self) -> list[str]:
        """The queues to fetch from: the plain queue (jobs queued before apps had queues)
        and every app's queue found among the unfinished jobs; an `apps` worker's are fixed."""
        if not self.apps:
            rows = await self.app.connector.execute_query_all_async(
                APP_QUEUES, apps=f"{self.queue}@"
            )
            self._queues += [r["queue_name"] for r in rows if r["queue_name"] not in self._queues]
        return self._queues

    async def _discover_loop(self) -> None:
        """A default worker looks new apps' queues up after each job notification (at most
        every `DISCOVER_GAP` s), else every `DISCOVER_EVERY` s, and grows in place the list
        procrastinate's worker (listening on every queue, `_worker_class`) fetches from."""
        self._notified = asyncio.Event()
        while not self.apps and not self._stopping.is_set():
            await self._sleep(DISCOVER_EVERY, self._notified)
            self._notified.clear()
            worker, known = self._worker, len(self._queues)
            if worker is None or self._stopping.is_set():
                continue
            try:
                if len(await self._fetch_queues()) > known:
                    worker.wake()
            except Exception as exc:
                logger.debug("queue worker: app queue lookup failed: %s", exc)
            await self._sleep(DISCOVER_GAP)

    def _job_notified(self) -> None:
        """procrastinate's listener got a job notification (any queue's)."""
        if self._notified is not None:
            self._notified.set()

    def _ready(self, worker_id: int) -> None:
        logger.info("queue worker %s ready on %s (id %s)", self.name, self._queues, worker_id)
        if self.on_ready is not None:
            self.on_ready()

    async def _sleep(self, seconds: float, event: asyncio.Event | None = None) -> None:
        """Wait `seconds`, or until `event` (default: the stop's) is set."""
        event = self._wake if event is None else event
        assert event is not None
        try:
            await asyncio.wait_for(event.wait(), seconds)
        except TimeoutError:
            pass

    async def _recover_loop(self) -> None:
        """`recover_stalled` every `stalled_after / 2` s, once connected for `stalled_after` s:
        after a start or an outage every heartbeat (its own too) is stale until the live
        workers beat again, and only the jobs of workers really gone must go back."""
        connected_since: float | None = None
        while not self._stopping.is_set():
            await self._sleep(max(0.5, self.stalled_after / 2))
            if self._stopping.is_set() or self._worker is None:
                connected_since = None
                continue
            try:
                if connected_since is None:
                    await self.app.check_connection_async()
                    connected_since = time.monotonic()
                if time.monotonic() - connected_since >= self.stalled_after:
                    await self.recover_stalled()
            except Exception as exc:
                connected_since = None
                logger.warning("queue worker: stalled-job check failed: %s", error_text(exc))

    async def recover_stalled(self) -> int:
        """Put the running jobs of workers without a recent heartbeat back in the queue; never
        one still running in this process (its worker id may be stale after an outage)."""
        manager = self.app.job_manager
        stalled = await manager.get_stalled_jobs(
            queue=None, task_name=TASK_NAME, seconds_since_heartbeat=self.stalled_after
        )
        count = 0
        for job in stalled:
            if job.id in self._running:
                continue
            try:
                await manager.retry_job(job)
            except Exception as exc:  # another worker put it back first
                logger.debug("queue worker: could not retry stalled job %s: %s", job.id, exc)
                continue
            count += 1
            logger.warning(
                "queue worker: job %s of a stalled worker (no heartbeat for %.0f s) put back",
                job.id,
                self.stalled_after,
            )
        self.recovered += count
        return count


async def _autocommit(conn: Any) -> None:
    """procrastinate sends one statement per connection checkout: in autocommit that is two
    round trips (the pool's liveness check, the call), not four (+ BEGIN, COMMIT)."""
    await conn.set_autocommit(True)


def _worker_class(worker_module: Any) -> Any:
    """procrastinate's `Worker`, announcing itself once registered, before its first fetch
    (a short `--drain` ends within milliseconds). With `on_notification` (a default worker)
    it listens on the channel every queue notifies (`procrastinate_any_queue_v1`): its queue
    list grows while it runs, and a job of a queue not in it yet costs a fetch that finds
    nothing and calls `on_notification` (the app-queue lookup). `wake()` makes it fetch now
    (the event procrastinate 3's notification handler sets)."""

    class ProcrastinateWorker(worker_module.Worker):  # type: ignore[misc,name-defined]
        def __init__(
            self,
            on_ready: Callable[[int], None],
            on_notification: Callable[[], None] | None,
            **options: Any,
        ) -> None:
            super().__init__(**options)
            self._on_ready = on_ready
            self._on_notification = on_notification

        def _start_side_tasks(self) -> Any:
            queues = self.queues  # type: ignore[has-type]
            if self._on_notification is not None:
                self.queues = None  # listen on every queue: read once, here
            try:
                tasks = super()._start_side_tasks()
            finally:
                self.queues = queues
            # a callback, as the readiness task was: one that raises is logged, the run goes on
            asyncio.get_running_loop().call_soon(self._on_ready, self.worker_id)
            return tasks

        async def _handle_notification(self, *, channel: str, notification: Any) -> None:
            await super()._handle_notification(channel=channel, notification=notification)
            if self._on_notification is not None and notification.get("type") == "job_inserted":
                self._on_notification()  # perhaps a queue it does not fetch yet

        def wake(self) -> None:
            self._new_job_event.set()

    return ProcrastinateWorker
