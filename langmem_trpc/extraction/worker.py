"""`AutoMemoryWorker`: background extraction with per-user ordering and a durable cursor.

A stable hash of (app_name, user_id) picks one of N bounded worker queues, so
one user's jobs run in order while other users use other workers. `enqueue`
does no I/O (safe on an event loop): the job reads the cursor and finds the
delta itself. Two jobs for one thread never run at once (a lock per thread
here, a claim in the backend across processes, the cursor re-read under
both), and a job whose messages the cursor already covers does nothing, so
nothing is read twice and a cursor never moves back (`job.py`, `delta.py`).
A full queue or a stopped worker never drops the delta: `on_full` runs the job
in the caller (the reference behaviour) or leaves it to the thread's next job
(docs/operating.md, "Worker sizing"; `EnqueueResult`).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from enum import Enum
from typing import Literal

from langchain_core.messages import BaseMessage

from ..errors import ConfigurationError, InvalidInputError, WorkerError
from ..service.protocol import MemoryService
from ..service.rules import check_user
from ..types import UserKey, check_optional_id
from .calls import ModelCalls
from .checkers import Checker
from .extractor import Extractor
from .job import JobReport, JobSettings, run_job
from .ops import Action
from .policies import check_policy
from .stats import Counters, WorkerStats

__all__ = ["AutoMemoryWorker", "EnqueueResult", "WorkerState"]

logger = logging.getLogger(__name__)

LOCK_STRIPES = 256
OnFull = Literal["sync", "defer"]


class WorkerState(str, Enum):
    IDLE = "idle"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"


class EnqueueResult(str, Enum):
    """What `enqueue` did with the job."""

    QUEUED = "queued"
    RAN_SYNC = "ran_sync"
    """Queue full or worker not running: the job ran in the caller."""
    OVERFLOW = "overflow"
    """Same, but the caller is an event loop thread: the job runs in a background thread."""
    DEFERRED = "deferred"
    SKIPPED = "skipped"
    """The caller was cancelled; the delta waits for the next run."""


@dataclass(frozen=True)
class _Job:
    user: UserKey
    thread_id: str
    messages: tuple[BaseMessage, ...]
    offset: int = 0


_STOP = object()


def fnv1a(*parts: str) -> int:
    """32-bit FNV-1a over the parts, NUL-separated (stable across processes, unlike hash())."""
    value = 0x811C9DC5
    for byte in "\x00".join(parts).encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


def check_job_input(
    user: UserKey, thread_id: str, messages: Sequence[BaseMessage]
) -> tuple[BaseMessage, ...]:
    """A snapshot of a job's messages, validated for every producer (this worker,
    `PostgresJobQueue`); `InvalidInputError` names the bad field."""
    check_user(user)
    if not isinstance(thread_id, str) or not thread_id.strip() or len(thread_id) > 512:
        raise InvalidInputError("thread_id", "must be a non-empty string of at most 512 characters")
    check_optional_id("thread_id", thread_id)  # no NUL, no lone surrogate (`fnv1a` encodes it)
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise InvalidInputError("messages", "must be a sequence of LangChain messages")
    snapshot = tuple(messages)
    for index, message in enumerate(snapshot):
        if not isinstance(message, BaseMessage):
            raise InvalidInputError(
                "messages", f"items must be BaseMessage, got {type(message).__name__}"
            )
        check_optional_id(f"messages[{index}].id", message.id)  # else every attempt fails
    return snapshot


def _actions(values: Iterable[str | Action]) -> frozenset[Action]:
    try:
        return frozenset(Action(v) for v in values)
    except ValueError as exc:
        raise ConfigurationError(f"actions: {exc}; expected add, update, delete, clear") from None


def _on_loop_thread() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _check_arguments(
    service: object,
    extractor: object,
    workers: int,
    queue_size: int,
    job_timeout: float | None,
    batch_messages: int,
    max_attempts: int,
    claim_ttl: float | None,
    max_calls_per_user: int,
    on_full: str,
) -> None:
    """`AutoMemoryWorker`'s arguments, each refused with a `ConfigurationError` naming it."""
    if not isinstance(service, MemoryService):
        raise ConfigurationError(f"service must be a MemoryService, got {type(service).__name__}")
    if not callable(getattr(extractor, "extract", None)):
        raise ConfigurationError("extractor must have an extract(request) method")
    if workers < 1 or queue_size < 1:
        raise ConfigurationError("workers and queue_size must be >= 1")
    if job_timeout is not None and job_timeout <= 0:
        raise ConfigurationError("job_timeout must be > 0 or None")
    if batch_messages < 1:
        raise ConfigurationError("batch_messages must be >= 1")
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise ConfigurationError("max_attempts must be an integer >= 1")
    if claim_ttl is not None and not 0 < claim_ttl <= 86_400:
        raise ConfigurationError("claim_ttl must be in (0, 86400] seconds or None")
    if max_calls_per_user < 1:
        raise ConfigurationError("max_calls_per_user must be >= 1")
    if on_full not in ("sync", "defer"):
        raise ConfigurationError(f"on_full must be 'sync' or 'defer', not {on_full!r}")


class AutoMemoryWorker:
    """Extracts memories from conversation threads in the background.

    Args:
        service: where memories and cursors live.
        extractor: `LLMExtractor(model)`, `VerbatimExtractor()` or any `Extractor`.
        checkers: all must pass for a job to extract (none: always).
        workers: worker threads (queues).
        queue_size: bounded queue length per worker.
        job_timeout: seconds per job (None: no limit); the extractor call gets the rest
            and is cancelled at the deadline (`extraction.calls`, docs/operating.md).
        batch_messages: new messages per extractor call; longer deltas run in
            batches and the cursor moves after each.
        policy: "merge_similar", "preserve_history" or "append_only".
        on_full: "sync" (run a job that does not fit in the caller) or "defer" (leave its
            delta to the thread's next job, which may never come).
        actions: operations the worker executes ("clear" is off by default).
        max_attempts: failed attempts in a row on one batch before it is
            dead-lettered (recorded in the backend, the cursor moves past it).
        claim_ttl: seconds a job's claim on its thread lasts unless renewed, and so
            blocks the thread after its job died (None: twice job_timeout, at least
            60 s; 600 s without a timeout).
        max_calls_per_user: extractor calls one user may have in flight, timed-out ones
            still running included; past it a job waits for a slot within its timeout,
            or fails at once (`ExtractorBusyError`) if one of them timed out.
        idle_gap: seconds between two messages' own times past which a batch ends
            (`JobSettings.idle_gap`; a backfill sets it, None: off).

    Example:
        ```python
        with AutoMemoryWorker(service, LLMExtractor(model), workers=2) as worker:
            worker.enqueue(user, "thread-1", state["messages"])
            worker.flush(timeout=30)  # tests and scripts: wait until its jobs are done
            print(worker.stats())
        ```
    """

    def __init__(
        self,
        service: MemoryService,
        extractor: Extractor,
        *,
        checkers: Sequence[Checker] | None = None,
        workers: int = 1,
        queue_size: int = 10,
        job_timeout: float | None = 30.0,
        batch_messages: int = 50,
        policy: str = "merge_similar",
        on_full: OnFull = "sync",
        actions: Iterable[str | Action] = ("add", "update", "delete"),
        max_attempts: int = 3,
        claim_ttl: float | None = None,
        max_calls_per_user: int = 4,
        idle_gap: float | None = None,
    ) -> None:
        _check_arguments(
            service,
            extractor,
            workers,
            queue_size,
            job_timeout,
            batch_messages,
            max_attempts,
            claim_ttl,
            max_calls_per_user,
            on_full,
        )
        self.service = service
        self.extractor = extractor
        self.settings = JobSettings(
            tuple(checkers or ()),
            check_policy(policy),
            _actions(actions),
            job_timeout,
            batch_messages,
            max_attempts=max_attempts,
            claim_ttl=claim_ttl,
            idle_gap=idle_gap,
        )
        self.workers = workers
        self.queue_size = queue_size
        self.on_full: OnFull = on_full
        self._state = WorkerState.IDLE
        self._state_lock = threading.Lock()
        self._queues: list[queue.Queue[object]] = []
        self._threads: list[threading.Thread] = []
        self._calls = ModelCalls(
            max_calls_per_user, job_timeout, getattr(extractor, "aclose", None)
        )
        weakref.finalize(self, self._calls.close)  # a worker dropped unclosed frees them too
        self._overflow_pool: ThreadPoolExecutor | None = None
        self._overflow_jobs: set[Future[JobReport]] = set()
        self._thread_locks = [threading.Lock() for _ in range(LOCK_STRIPES)]
        self._counters = Counters()
        self._warned_not_started = False

    # -- lifecycle ----------------------------------------------------------

    @property
    def state(self) -> WorkerState:
        return self._state

    def start(self) -> AutoMemoryWorker:
        """Start the worker threads; only once, from IDLE."""
        with self._state_lock:
            if self._state != WorkerState.IDLE:
                raise WorkerError(f"cannot start a worker that is {self._state.value}")
            self._queues = [queue.Queue(maxsize=self.queue_size) for _ in range(self.workers)]
            self._threads = [
                threading.Thread(
                    target=self._loop, args=(q,), name=f"langmem-worker-{i}", daemon=True
                )
                for i, q in enumerate(self._queues)
            ]
            for thread in self._threads:
                thread.start()
            self._state = WorkerState.RUNNING
        return self

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop accepting jobs, drain the queues; True if every worker finished within `timeout`
        (then it also runs `close()`; else the call loop and threads stay for running jobs)."""
        with self._state_lock:
            if self._state == WorkerState.IDLE:
                raise WorkerError("cannot stop a worker that was never started")
            if self._state == WorkerState.RUNNING:
                self._state = WorkerState.STOPPING
        deadline = time.monotonic() + max(0.0, timeout)
        for q in self._queues:
            try:
                q.put(_STOP, timeout=max(0.0, deadline - time.monotonic()))
            except queue.Full:
                logger.warning("auto_memory: queue still full at stop; worker left draining")
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        finished = not any(t.is_alive() for t in self._threads)
        with self._state_lock:
            overflow = list(self._overflow_jobs)
        _, unfinished = wait(overflow, timeout=max(0.0, deadline - time.monotonic()))
        if unfinished:
            logger.warning(
                "auto_memory: %d overflow job(s) still running at stop; their cursors have not "
                "moved, so the threads' next runs re-read what they miss",
                len(unfinished),
            )
            finished = False
        with self._state_lock:
            self._state = WorkerState.STOPPED
            overflow_pool, self._overflow_pool = self._overflow_pool, None
        if overflow_pool is not None:
            overflow_pool.shutdown(wait=False)
        if finished:
            self._calls.close()
        return finished

    def close(self) -> None:
        """Stop the extractor-call loop (cancelling its calls) and threads; `stop()` does it
        once drained. A worker used only through `process` calls it when done."""
        self._calls.close()

    def __enter__(self) -> AutoMemoryWorker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> AutoMemoryWorker:
        return self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.astop()

    async def astop(self, timeout: float = 10.0) -> bool:
        return await asyncio.to_thread(self.stop, timeout)

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Wait until every queued job and every overflow job has finished; True if that
        happened within `timeout` seconds (None: no limit). For tests and scripts that
        read memories right after a run; a worker that is not running has no queue, so
        this waits only for its overflow jobs. Jobs queued meanwhile are waited for too."""
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        for jobs in list(self._queues):
            with jobs.all_tasks_done:
                while jobs.unfinished_tasks:
                    if left() == 0.0:
                        return False
                    jobs.all_tasks_done.wait(left())
        with self._state_lock:
            overflow = list(self._overflow_jobs)
        _, unfinished = wait(overflow, timeout=left())
        return not unfinished

    async def aflush(self, timeout: float | None = 30.0) -> bool:
        """`flush` for async callers: waits in a thread, never blocks the event loop."""
        return await asyncio.to_thread(self.flush, timeout)

    # -- submitting work ----------------------------------------------------

    def enqueue(
        self,
        user: UserKey,
        thread_id: str,
        messages: Sequence[BaseMessage],
        *,
        cancel: threading.Event | None = None,
    ) -> EnqueueResult:
        """Hand the thread's messages to a worker; thread-safe, callable from any thread.
        `cancel`: set when the caller was cancelled; a job that cannot be queued is then skipped."""
        job = self._job(user, thread_id, messages)
        result = self._place(job, lambda: cancel is not None and cancel.is_set())
        if result == EnqueueResult.RAN_SYNC:
            if _on_loop_thread():
                self._counters.bump("jobs_overflow")
                self._submit_overflow(job)
                return EnqueueResult.OVERFLOW
            self._counters.bump("jobs_sync")
            self._run(job)
        return result

    async def aenqueue(
        self, user: UserKey, thread_id: str, messages: Sequence[BaseMessage]
    ) -> EnqueueResult:
        """`enqueue` for async callers: never blocks the loop; a fallback job runs in a thread.
        A cancelled caller skips a job that cannot be queued; a started job always finishes."""
        job = self._job(user, thread_id, messages)
        task = asyncio.current_task()
        result = self._place(  # cancelling(): 3.11+
            job, lambda: task is not None and getattr(task, "cancelling", lambda: 0)() > 0
        )
        if result == EnqueueResult.RAN_SYNC:
            self._counters.bump("jobs_sync")
            await asyncio.shield(asyncio.to_thread(self._run, job))
        return result

    def process(
        self, user: UserKey, thread_id: str, messages: Sequence[BaseMessage], *, offset: int = 0
    ) -> JobReport:
        """Run the job now, in the caller, and say what happened (works in any state).

        `offset`: the index of `messages[0]` in the thread, when `messages` is a window
        of it (a queued job's payload), for the cursor's `message_count`."""
        return self._run(self._job(user, thread_id, messages, offset))

    async def aprocess(
        self, user: UserKey, thread_id: str, messages: Sequence[BaseMessage]
    ) -> JobReport:
        """`process` in a worker thread; the job completes even if the caller is cancelled."""
        job = self._job(user, thread_id, messages)
        return await asyncio.shield(asyncio.to_thread(self._run, job))

    def stats(self) -> WorkerStats:
        depths = tuple(q.qsize() for q in self._queues)
        return self._counters.snapshot(self._state.value, depths, self._calls.counts())

    # -- internals ----------------------------------------------------------

    def _job(
        self, user: UserKey, thread_id: str, messages: Sequence[BaseMessage], offset: int = 0
    ) -> _Job:
        snapshot = check_job_input(user, thread_id, messages)
        self._counters.seen(user, thread_id, len(snapshot))
        return _Job(user, thread_id, snapshot, offset)

    def _place(self, job: _Job, cancelled: Callable[[], bool]) -> EnqueueResult:
        """Queue the job, else its fallback (RAN_SYNC: the caller runs it)."""
        with self._state_lock:
            if self._state == WorkerState.RUNNING:
                target = self._queues[fnv1a(job.user.app_name, job.user.user_id) % self.workers]
                try:
                    target.put_nowait(job)
                except queue.Full:
                    logger.warning(
                        "auto_memory: job queue full for %s, fallback to %s", job.user, self.on_full
                    )
                else:
                    self._counters.bump("jobs_enqueued")
                    return EnqueueResult.QUEUED
            elif self._state == WorkerState.IDLE and not self._warned_not_started:
                self._warned_not_started = True
                logger.warning(
                    "auto_memory: AutoMemoryWorker was never started, so %s; call "
                    "worker.start() (or use `with worker:`) to extract in the background",
                    "its jobs run synchronously in the caller"
                    if self.on_full == "sync"
                    else "its jobs are deferred and never run (on_full='defer')",
                )
        if cancelled():
            self._counters.bump("jobs_skipped_cancelled")
            return EnqueueResult.SKIPPED
        if self.on_full == "defer":
            self._counters.bump("jobs_deferred")
            return EnqueueResult.DEFERRED
        return EnqueueResult.RAN_SYNC

    def _loop(self, jobs: queue.Queue[object]) -> None:
        while True:
            job = jobs.get()
            try:
                if job is _STOP:
                    return
                assert isinstance(job, _Job)
                self._run(job)
            except Exception:  # the loop must survive anything a job throws
                logger.exception("auto_memory: unexpected error in worker loop")
            finally:
                jobs.task_done()

    def _run(self, job: _Job) -> JobReport:
        stripe = fnv1a(job.user.app_name, job.user.user_id, job.thread_id) % LOCK_STRIPES
        with self._thread_locks[stripe]:
            report = run_job(
                self.service,
                self.extractor,
                self.settings,
                job.user,
                job.thread_id,
                job.messages,
                run_extractor=self._calls.run,
                offset=job.offset,
            )
        self._counters.record(report)
        return report

    def _submit_overflow(self, job: _Job) -> None:
        """Run a fallback job off the event loop, in the worker's overflow pool."""
        with self._state_lock:
            if self._overflow_pool is None:
                self._overflow_pool = ThreadPoolExecutor(
                    self.workers + 32, thread_name_prefix="langmem-overflow"
                )
            future = self._overflow_pool.submit(self._run, job)
            self._overflow_jobs.add(future)
        future.add_done_callback(self._overflow_done)

    def _overflow_done(self, future: Future[JobReport]) -> None:
        with self._state_lock:
            self._overflow_jobs.discard(future)
