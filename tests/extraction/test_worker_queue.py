"""The worker's lifecycle, queues, fallbacks, async twins, ordering and stats."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict

import pytest
from langchain_core.messages import HumanMessage

from langmem_trpc import (
    AutoMemoryWorker,
    ConfigurationError,
    InvalidInputError,
    UserKey,
    WorkerError,
)
from langmem_trpc.extraction import EnqueueResult, VerbatimExtractor, WorkerState


class Gate(VerbatimExtractor):
    """Blocks jobs of thread "slow" until released; records every job's messages."""

    def __init__(self) -> None:
        super().__init__()
        self.started = threading.Event()
        self.release = threading.Event()
        self.seen: list[tuple[str, str, list[str]]] = []
        self.lock = threading.Lock()

    def extract(self, request):
        if request.thread_id == "slow":
            self.started.set()
            self.release.wait(5)
        with self.lock:
            self.seen.append(
                (request.user.user_id, request.thread_id, [m.id for m in request.messages])
            )
        return super().extract(request)


class Sleepy(VerbatimExtractor):
    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def extract(self, request):
        time.sleep(self.seconds)
        return super().extract(request)


def msg(text: str, i: int | str) -> HumanMessage:
    return HumanMessage(text, id=str(i))


def test_lifecycle_is_explicit(service, user):
    worker = AutoMemoryWorker(service, VerbatimExtractor())
    assert worker.state == WorkerState.IDLE and threading.active_count() >= 1
    with pytest.raises(WorkerError):
        worker.stop()
    worker.start()
    with pytest.raises(WorkerError):
        worker.start()
    assert worker.stop(timeout=5) is True
    assert worker.state == WorkerState.STOPPED
    with pytest.raises(WorkerError):
        worker.start()


def test_nothing_starts_in_init(service):
    before = threading.active_count()
    AutoMemoryWorker(service, VerbatimExtractor(), workers=4)
    assert threading.active_count() == before


def test_bad_settings_and_inputs_are_rejected(service, user):
    with pytest.raises(ConfigurationError):
        AutoMemoryWorker(service, VerbatimExtractor(), policy="merge_everything")
    with pytest.raises(ConfigurationError):
        AutoMemoryWorker(service, VerbatimExtractor(), workers=0)
    with pytest.raises(ConfigurationError):
        AutoMemoryWorker(service, VerbatimExtractor(), on_full="drop")  # type: ignore[arg-type]
    worker = AutoMemoryWorker(service, VerbatimExtractor())
    with pytest.raises(InvalidInputError, match="thread_id"):
        worker.enqueue(user, "", [])
    with pytest.raises(InvalidInputError, match="messages"):
        worker.process(user, "t", ["not a message"])  # type: ignore[list-item]


def test_context_manager_drains_the_queue(service, user):
    with AutoMemoryWorker(service, VerbatimExtractor(), workers=2) as worker:
        for i in range(5):
            assert (
                worker.enqueue(UserKey("app", f"u{i}"), "t", [msg(f"I like tea {i}", i)])
                == EnqueueResult.QUEUED
            )
    assert sum(service.count(UserKey("app", f"u{i}")) for i in range(5)) == 5
    assert worker.stats().jobs_run == 5 and worker.stats().cursor_lag == 0


def test_full_queue_runs_the_job_in_the_caller(service, user):
    gate = Gate()
    worker = AutoMemoryWorker(service, gate, workers=1, queue_size=1).start()
    try:
        assert worker.enqueue(user, "slow", [msg("I like slow tea", 1)]) == EnqueueResult.QUEUED
        assert gate.started.wait(5)
        assert worker.enqueue(user, "t2", [msg("I like green tea", 2)]) == EnqueueResult.QUEUED
        caller = threading.current_thread().name
        result = worker.enqueue(user, "t3", [msg("I live in Oslo", 3)])
        assert result == EnqueueResult.RAN_SYNC and caller == threading.current_thread().name
        assert [e.text for e in service.read(user)] == ["I live in Oslo"]
        assert worker.stats().jobs_sync == 1
    finally:
        gate.release.set()
        assert worker.stop(timeout=5)
    assert service.count(user) == 3


def test_not_started_runs_sync_and_defer_leaves_the_delta(service, user):
    sync_worker = AutoMemoryWorker(service, VerbatimExtractor())
    assert sync_worker.enqueue(user, "t", [msg("I like tea", 1)]) == EnqueueResult.RAN_SYNC
    assert service.count(user) == 1
    defer = AutoMemoryWorker(service, VerbatimExtractor(), on_full="defer")
    msgs = [msg("I like tea", 1), msg("I live in Oslo", 2)]
    assert defer.enqueue(user, "t", msgs) == EnqueueResult.DEFERRED
    stats = defer.stats()
    assert stats.jobs_deferred == 1 and stats.cursor_lag == 2
    assert service.count(user) == 1
    assert defer.process(user, "t", msgs).messages == 1  # the next run covers the deferred delta
    assert service.count(user) == 2 and defer.stats().cursor_lag == 0


def test_cancelled_sync_caller_is_skipped(service, user):
    cancelled = threading.Event()
    cancelled.set()
    worker = AutoMemoryWorker(service, VerbatimExtractor())
    assert (
        worker.enqueue(user, "t", [msg("I like tea", 1)], cancel=cancelled) == EnqueueResult.SKIPPED
    )
    assert service.count(user) == 0 and service.get_cursor(user, "t") is None
    assert worker.stats().jobs_skipped_cancelled == 1


async def test_cancelled_async_caller_is_skipped(service, user):
    worker = AutoMemoryWorker(service, VerbatimExtractor())
    outcome: list[EnqueueResult] = []

    async def agent_run():
        try:
            await asyncio.sleep(10)
        finally:  # an after-agent hook running while the task is cancelled
            outcome.append(await worker.aenqueue(user, "t", [msg("I like tea", 1)]))

    task = asyncio.create_task(agent_run())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert outcome == [EnqueueResult.SKIPPED] and service.count(user) == 0


async def test_aenqueue_fallback_never_blocks_the_loop(service, user):
    worker = AutoMemoryWorker(service, Sleepy(0.3))
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    tick = asyncio.create_task(ticker())
    result = await worker.aenqueue(user, "t", [msg("I like tea", 1)])
    tick.cancel()
    assert result == EnqueueResult.RAN_SYNC and ticks >= 10 and service.count(user) == 1


async def test_accepted_job_survives_a_cancelled_caller(service, user):
    worker = AutoMemoryWorker(service, Sleepy(0.2))
    task = asyncio.create_task(worker.aenqueue(user, "t", [msg("I like tea", 1)]))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(100):
        if service.get_cursor(user, "t") is not None:
            break
        await asyncio.sleep(0.02)
    assert service.count(user) == 1 and service.get_cursor(user, "t").last_message_id == "1"


async def test_aprocess_and_async_context_manager(service, user):
    async with AutoMemoryWorker(service, VerbatimExtractor()) as worker:
        report = await worker.aprocess(user, "t", [msg("I like tea", 1)])
        assert report.added == 1
        assert (
            await worker.aenqueue(user, "t", [msg("I like tea", 1), msg("I live in Oslo", 2)])
            == EnqueueResult.QUEUED
        )
    assert service.count(user) == 2 and worker.state == WorkerState.STOPPED


async def test_enqueue_from_a_loop_thread_never_runs_inline(service, user):
    gate = Gate()
    worker = AutoMemoryWorker(service, gate, workers=1, queue_size=1).start()
    worker.enqueue(user, "slow", [msg("slow", 1)])
    assert gate.started.wait(5)
    worker.enqueue(user, "t2", [msg("queued", 2)])
    assert worker.enqueue(user, "t3", [msg("overflow", 3)]) == EnqueueResult.OVERFLOW
    gate.release.set()
    assert await worker.astop(timeout=5)
    for _ in range(100):
        if service.count(user) == 3:
            break
        await asyncio.sleep(0.02)
    assert service.count(user) == 3


def test_two_jobs_for_one_thread_never_read_the_same_delta(service, user):
    gate = Gate()
    worker = AutoMemoryWorker(service, gate, workers=1, queue_size=5).start()
    msgs = [msg("first thing", 1)]
    for _ in range(3):
        worker.enqueue(user, "t", list(msgs))
    threads = [threading.Thread(target=worker.process, args=(user, "t", msgs)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert worker.stop(timeout=5)
    assert [ids for _, _, ids in gate.seen] == [["1"]]


@pytest.mark.slow
def test_per_user_order_with_50_users_1000_jobs_4_workers(service):
    gate = Gate()
    users = [UserKey("app", f"user-{i}") for i in range(50)]
    worker = AutoMemoryWorker(service, gate, workers=4, queue_size=1000).start()
    threads: dict[UserKey, list[HumanMessage]] = defaultdict(list)
    for round_ in range(20):
        for u in users:
            threads[u].append(
                msg(f"{u.user_id} says thing number {round_}", f"{u.user_id}-{round_}")
            )
            assert worker.enqueue(u, "t", list(threads[u])) == EnqueueResult.QUEUED
    assert worker.stop(timeout=60)
    per_user: dict[str, list[list[str]]] = defaultdict(list)
    for user_id, _, ids in gate.seen:
        per_user[user_id].append(ids)
    for u in users:
        assert per_user[u.user_id] == [[f"{u.user_id}-{r}"] for r in range(20)], u
    stats = worker.stats()
    assert stats.jobs_run == 1000 and stats.jobs_failed == 0 and stats.cursor_lag == 0
    assert sum(service.count(u) for u in users) == 1000


def test_stats_count_jobs_and_memories(service, user):
    worker = AutoMemoryWorker(service, VerbatimExtractor())
    msgs = [msg("I like tea", 1)]
    worker.process(user, "t", msgs)
    worker.process(user, "t", msgs)
    worker.process(user, "t2", msgs)
    stats = worker.stats().as_dict()
    assert stats["jobs_run"] == 2 and stats["jobs_nothing_new"] == 1
    assert stats["memories_added"] == 1 and stats["memories_skipped_duplicate"] == 1
    assert stats["queue_depth"] == 0 and stats["state"] == "idle"


def test_flush_waits_until_queued_jobs_are_done(service, user):
    gate = Gate()
    with AutoMemoryWorker(service, gate) as worker:
        assert worker.enqueue(user, "slow", [msg("I like slow tea", 1)]) == EnqueueResult.QUEUED
        assert gate.started.wait(5)
        assert worker.flush(timeout=0.2) is False  # the job is still running
        gate.release.set()
        assert worker.flush(timeout=10) is True
        assert [t for _, t, _ in gate.seen] == ["slow"]
        assert service.count(user) == 1


async def test_aflush_waits_without_blocking_the_loop(service, user):
    gate = Gate()
    async with AutoMemoryWorker(service, gate) as worker:
        await worker.aenqueue(user, "slow", [msg("I like slow tea", 1)])
        flushed = asyncio.create_task(worker.aflush(timeout=10))
        await asyncio.to_thread(gate.started.wait, 5)
        assert not flushed.done()  # the loop runs while aflush waits
        gate.release.set()
        assert await flushed is True
        assert await service.acount(user) == 1


def test_flush_on_a_worker_without_queues_returns_at_once(service, user):
    worker = AutoMemoryWorker(service, VerbatimExtractor())
    assert worker.flush(timeout=0) is True
    worker.close()


def test_a_never_started_worker_warns_once(service, user, caplog):
    worker = AutoMemoryWorker(service, VerbatimExtractor())
    with caplog.at_level("WARNING", logger="langmem_trpc.extraction.worker"):
        assert worker.enqueue(user, "t1", [msg("I like tea", 1)]) == EnqueueResult.RAN_SYNC
        assert worker.enqueue(user, "t2", [msg("I like coffee", 2)]) == EnqueueResult.RAN_SYNC
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1, warnings
    assert "never started" in warnings[0] and "worker.start()" in warnings[0]
    assert "synchronously in the caller" in warnings[0]
    worker.close()


class Unimplemented(VerbatimExtractor):
    def extract(self, request):
        raise NotImplementedError


def test_a_job_failure_without_a_message_says_what_it_was(service, user, caplog):
    """An empty exception text made the log read `job failed ...: NotImplementedError: `."""
    worker = AutoMemoryWorker(service, Unimplemented())
    with caplog.at_level("WARNING", logger="langmem_trpc.extraction.job"):
        report = worker.process(user, "t", [msg("I like tea", 1)])
    worker.close()
    assert report.error is not None
    assert report.error.startswith("NotImplementedError (raised without a message: ")
    assert any(report.error in r.getMessage() for r in caplog.records)
