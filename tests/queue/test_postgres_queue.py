"""PostgresJobQueue and QueueWorker against the suite's real PostgreSQL (one database per test)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, messages_from_dict

from langmem_trpc import UserKey
from langmem_trpc.backends.postgres import PostgresMemoryService
from langmem_trpc.errors import BackendError, ConfigurationError, InvalidInputError
from langmem_trpc.extraction import (
    AutoMemoryWorker,
    ExtractionRequest,
    MemoryOp,
    VerbatimExtractor,
)
from langmem_trpc.extraction.job import JobStatus
from langmem_trpc.queue import EnqueueOutcome, PostgresJobQueue, QueueWorker

USER = UserKey("queue-unit", "alice")
TOOL_CALL = {"name": "search", "args": {}, "id": "call-1", "type": "tool_call"}


def history(count: int, start: int = 0, prefix: str = "m") -> list[BaseMessage]:
    return [
        HumanMessage(f"fact number {i} about {prefix}", id=f"{prefix}{i}")
        for i in range(start, count)
    ]


@pytest.fixture
def service(pg_url: str) -> Iterator[PostgresMemoryService]:
    svc = PostgresMemoryService(pg_url, pool_size=4)
    svc.setup()
    yield svc
    svc.close()


@pytest.fixture
def queue(pg_url: str, service: PostgresMemoryService) -> Iterator[PostgresJobQueue]:
    with PostgresJobQueue(pg_url) as q:
        q.setup()
        yield q


def jobs(url: str) -> list[dict[str, Any]]:
    with psycopg.connect(url, row_factory=psycopg.rows.dict_row) as conn:
        return conn.execute(
            "SELECT id, status::text AS status, queue_name, queueing_lock, attempts, args"
            " FROM procrastinate_jobs ORDER BY id"
        ).fetchall()


def payload_ids(job: dict[str, Any]) -> list[str | None]:
    return [m.id for m in messages_from_dict(job["args"]["messages"])]


def drain(
    url: str, service: PostgresMemoryService, extractor: Any = None, **kw: Any
) -> QueueWorker:
    worker = QueueWorker(url, service, extractor or VerbatimExtractor(), poll_interval=0.2, **kw)
    worker.run(drain=True)
    return worker


def texts(service: PostgresMemoryService, user: UserKey = USER) -> list[str]:
    return sorted(e.text for e in service.read(user))


def test_setup_is_idempotent(queue: PostgresJobQueue) -> None:
    queue.setup()
    queue.setup()
    assert queue.stats().depth == 0


def test_setup_indexes_the_waiting_jobs_by_lock(pg_url: str, queue: PostgresJobQueue) -> None:
    """The per-user lock check of procrastinate's fetch has an index that does not depend
    on fresh table statistics (a fast-grown backlog otherwise drains at a crawl)."""
    with psycopg.connect(pg_url) as conn:
        row = conn.execute(
            "SELECT indexdef FROM pg_indexes"
            " WHERE indexname = 'langmem_procrastinate_jobs_waiting_lock'"
        ).fetchone()
    assert row is not None
    assert "(lock, id)" in row[0] and "todo" in row[0] and "doing" in row[0]


CAP = 65_536


def big(message_id: str | None, size: int = 3 * CAP) -> HumanMessage:
    return HumanMessage("x" * size, id=message_id)


@pytest.mark.timeout(120)
def test_a_message_over_the_cap_after_an_anchor_is_a_counted_placeholder(
    pg_url: str, service: PostgresMemoryService, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 31 item 1: an anchor then a message over the cap looped forever in enqueue."""
    with PostgresJobQueue(pg_url, max_payload_bytes=CAP) as q:
        q.setup()
        q.enqueue(USER, "t", history(1))
        drain(pg_url, service)
        thread = [*history(1), big("big"), *history(3, 1)]
        with caplog.at_level("WARNING", logger="langmem_trpc.queue.producer"):
            assert q.enqueue(USER, "t", thread) == EnqueueOutcome.QUEUED
        assert q.counters()["oversized"] == 1 and q.stats().oversized == 1
        assert "'big'" in caplog.text and "placeholder" in caplog.text
        (job,) = [j for j in jobs(pg_url) if j["status"] == "todo"]
        assert payload_ids(job) == ["m0", "big", "m1", "m2"]
        assert len(json.dumps(job["args"])) < CAP
        drain(pg_url, service)
    assert texts(service) == [f"fact number {i} about m" for i in range(3)]
    cursor = service.get_cursor(USER, "t")
    assert cursor is not None and cursor.last_message_id == "m2" and cursor.message_count == 4


@pytest.mark.parametrize("message_id", ["big", None])
def test_a_thread_opening_with_a_message_over_the_cap_is_extracted_past_it(
    pg_url: str, service: PostgresMemoryService, message_id: str | None
) -> None:
    """Issue 31 item 2: every later enqueue failed, the thread was never extracted again."""
    thread = [big(message_id), *history(2)]
    with PostgresJobQueue(pg_url, max_payload_bytes=CAP) as q:
        q.setup()
        assert q.enqueue(USER, "t", thread[:1]) == EnqueueOutcome.QUEUED
        drain(pg_url, service)
        assert q.enqueue(USER, "t", thread) == EnqueueOutcome.QUEUED
        drain(pg_url, service)
        assert texts(service) == ["fact number 0 about m", "fact number 1 about m"]
        # the cursor covers the big message itself: nothing new, not re-queued
        assert q.enqueue(USER, "t", thread) == EnqueueOutcome.NOTHING_NEW
        assert q.enqueue(USER, "t", [*thread, *history(3, 2)]) == EnqueueOutcome.QUEUED
        drain(pg_url, service)
        assert q.counters()["oversized"] == 1 and q.counters()["rejected"] == 0
    assert len(texts(service)) == 3
    assert all(j["status"] == "succeeded" for j in jobs(pg_url))


def test_the_queue_and_the_in_process_worker_both_go_on_past_a_message_over_the_cap(
    pg_url: str, service: PostgresMemoryService
) -> None:
    """Same thread, both paths: the rest is extracted; the big message is reported (the
    queue: a counted placeholder; in process: its memory refused, `memories_failed`)."""
    thread = [HumanMessage("word " * (3 * CAP // 5), id="big"), *history(2)]
    in_process = UserKey("queue-unit", "bob")
    worker = AutoMemoryWorker(service, VerbatimExtractor())
    try:
        assert worker.process(in_process, "t", thread).status == JobStatus.COMPLETED
        assert worker.stats().memories_failed == 1
    finally:
        worker.close()
    with PostgresJobQueue(pg_url, max_payload_bytes=CAP) as q:
        q.setup()
        q.enqueue(USER, "t", thread)
        drain(pg_url, service)
        assert q.counters()["oversized"] == 1
    assert (
        texts(service)
        == texts(service, in_process)
        == [
            "fact number 0 about m",
            "fact number 1 about m",
        ]
    )
    for user in (USER, in_process):
        cursor = service.get_cursor(user, "t")
        assert cursor is not None and cursor.last_message_id == "m1"


def test_a_cap_too_small_for_placeholders_is_refused(pg_url: str) -> None:
    with pytest.raises(ConfigurationError, match="max_payload_bytes must be >= 65536"):
        PostgresJobQueue(pg_url, max_payload_bytes=CAP - 1)


def test_bad_input_is_refused_before_any_write(queue: PostgresJobQueue, pg_url: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        queue.enqueue(USER, "", history(1))
    assert info.value.field == "thread_id"
    with pytest.raises(InvalidInputError) as info:
        queue.enqueue(USER, "t", ["not a message"])  # type: ignore[list-item]
    assert info.value.field == "messages"
    assert jobs(pg_url) == []


def test_a_waiting_job_of_a_thread_collapses_to_the_newest_messages(
    queue: PostgresJobQueue, pg_url: str, service: PostgresMemoryService
) -> None:
    assert queue.enqueue(USER, "t", history(2)) == EnqueueOutcome.QUEUED
    assert queue.enqueue(USER, "t", history(4)) == EnqueueOutcome.COLLAPSED
    waiting = jobs(pg_url)
    assert len(waiting) == 1
    assert payload_ids(waiting[0]) == ["m0", "m1", "m2", "m3"]
    drain(pg_url, service)
    assert texts(service) == sorted(f"fact number {i} about m" for i in range(4))
    assert [j["status"] for j in jobs(pg_url)] == ["succeeded"]


def test_an_older_snapshot_never_replaces_the_waiting_job(
    queue: PostgresJobQueue, pg_url: str
) -> None:
    queue.enqueue(USER, "t", history(4))
    assert queue.enqueue(USER, "t", history(2)) == EnqueueOutcome.COLLAPSED
    assert payload_ids(jobs(pg_url)[0]) == ["m0", "m1", "m2", "m3"]


def test_a_rewritten_history_is_queued_as_a_job_of_its_own(
    queue: PostgresJobQueue, pg_url: str
) -> None:
    queue.enqueue(USER, "t", history(3))
    rewritten = history(2, prefix="r")
    assert queue.enqueue(USER, "t", rewritten) == EnqueueOutcome.QUEUED
    waiting = jobs(pg_url)
    assert [payload_ids(j) for j in waiting] == [["m0", "m1", "m2"], ["r0", "r1"]]
    assert waiting[1]["queueing_lock"] is None


def test_the_payload_is_the_delta_after_the_cursor_with_one_anchor(
    queue: PostgresJobQueue, pg_url: str, service: PostgresMemoryService
) -> None:
    queue.enqueue(USER, "t", history(4))
    drain(pg_url, service)
    assert queue.enqueue(USER, "t", history(4)) == EnqueueOutcome.NOTHING_NEW
    assert queue.enqueue(USER, "t", history(6)) == EnqueueOutcome.QUEUED
    newest = jobs(pg_url)[-1]
    assert payload_ids(newest) == ["m3", "m4", "m5"]
    drain(pg_url, service)
    assert texts(service) == sorted(f"fact number {i} about m" for i in range(6))
    # the in-process path still finds the thread's position in the windowed cursor
    cursor = service.get_cursor(USER, "t")
    assert cursor is not None and cursor.last_message_id == "m5"
    assert queue.enqueue(USER, "t", history(6)) == EnqueueOutcome.NOTHING_NEW


def test_a_queue_written_cursor_counts_the_threads_messages_not_the_payloads(
    queue: PostgresJobQueue, pg_url: str, service: PostgresMemoryService
) -> None:
    """What the UI shows as "messages read" and the legacy anchor search relies on."""
    queue.enqueue(USER, "t", history(10))
    drain(pg_url, service)
    queue.enqueue(USER, "t", history(14))
    assert jobs(pg_url)[-1]["args"]["offset"] == 9  # the anchor m9
    drain(pg_url, service)
    cursor = service.get_cursor(USER, "t")
    assert cursor is not None and cursor.message_count == 14
    queue.enqueue(USER, "t", history(14) + [AIMessage("", id="tool", tool_calls=[TOOL_CALL])])
    drain(pg_url, service)  # only tool traffic: the cursor moves past it, counted
    cursor = service.get_cursor(USER, "t")
    assert cursor is not None and cursor.message_count == 15


def test_jobs_queued_before_the_offset_existed_still_run(
    queue: PostgresJobQueue, pg_url: str, service: PostgresMemoryService
) -> None:
    queue.enqueue(USER, "t", history(2))
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE procrastinate_jobs SET args = args - 'offset'")
    drain(pg_url, service)
    assert texts(service) == ["fact number 0 about m", "fact number 1 about m"]


def test_jobs_go_to_their_apps_queue_and_a_worker_takes_only_its_apps(
    queue: PostgresJobQueue, pg_url: str, service: PostgresMemoryService
) -> None:
    other = UserKey("queue-other", "bob")
    for user, count in ((USER, 1), (other, 2)):
        queue.enqueue(user, "t", history(count))
    assert [j["queue_name"] for j in jobs(pg_url)] == ["langmem@queue-unit", "langmem@queue-other"]
    assert queue.stats().per_app_depth == {"queue-unit": 1, "queue-other": 1}
    drain(pg_url, service, apps=["queue-other"])
    assert texts(service) == [] and len(texts(service, other)) == 2
    stats = queue.stats()
    assert stats.depth == 1 and stats.per_app_depth == {"queue-unit": 1}
    drain(pg_url, service)  # no apps: every app's
    assert texts(service) == ["fact number 0 about m"]


def test_a_long_app_names_queue_is_hashed_to_fit_procrastinates_128_characters(
    queue: PostgresJobQueue, pg_url: str, service: PostgresMemoryService
) -> None:
    long = UserKey("a" * 150, "bob")
    queue.enqueue(long, "t", history(1))
    name = jobs(pg_url)[0]["queue_name"]
    assert name.startswith("langmem@#") and len(name) == len("langmem@#") + 16
    drain(pg_url, service, apps=[long.app_name])
    assert texts(service, long) == ["fact number 0 about m"]


def test_a_default_worker_also_takes_jobs_of_the_plain_queue_and_new_apps(
    queue: PostgresJobQueue, pg_url: str, service: PostgresMemoryService
) -> None:
    """Jobs queued before apps had queues are in `langmem`; an app first seen while the
    worker runs is found within a second (it joins the list the worker fetches from, and
    the worker listens on every queue's channel: polling every 30 s cannot explain it)."""
    queue.enqueue(USER, "t", history(1))
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE procrastinate_jobs SET queue_name = 'langmem'")
    late = UserKey("queue-late", "carol")

    async def main() -> None:
        worker = QueueWorker(pg_url, service, VerbatimExtractor(), poll_interval=30)
        run = asyncio.create_task(worker.arun())
        deadline = time.monotonic() + 20
        while not texts(service) and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        for n in range(2):  # the second one arrives once the worker listens on the queue
            await queue.aenqueue(late, f"t{n}", history(1, prefix=f"p{n}"))
            deadline = time.monotonic() + 8
            while len(texts(service, late)) <= n and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.1)
        worker.stop()
        await run

    asyncio.run(main())
    assert texts(service) == ["fact number 0 about m"]
    assert texts(service, late) == ["fact number 0 about p0", "fact number 0 about p1"]


class SlowFor(VerbatimExtractor):
    """Verbatim, after `seconds` for `user`'s jobs (a long model call)."""

    def __init__(self, user: UserKey, seconds: float) -> None:
        super().__init__()
        self.user, self.seconds = user, seconds

    def extract(self, request: ExtractionRequest) -> list[MemoryOp]:
        if request.user == self.user:
            time.sleep(self.seconds)
        return super().extract(request)


def test_a_new_apps_job_does_not_wait_for_the_running_jobs(
    queue: PostgresJobQueue, pg_url: str, service: PostgresMemoryService
) -> None:
    """A default worker takes a new app's queue in while a long job runs: the new app's
    job is done long before the running one ends (a restart of procrastinate's worker
    would first wait for the running job)."""
    late = UserKey("queue-late", "carol")

    async def main() -> tuple[float, float]:
        worker = QueueWorker(pg_url, service, SlowFor(USER, 6.0), poll_interval=30)
        run = asyncio.create_task(worker.arun())
        await queue.aenqueue(USER, "slow", history(1))
        while not worker._running:  # noqa: ASYNC110 - the slow job has started
            await asyncio.sleep(0.05)
        started = time.monotonic()
        await queue.aenqueue(late, "t", history(1, prefix="p"))
        while not texts(service, late) and time.monotonic() - started < 15:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        late_done = time.monotonic() - started
        while not texts(service) and time.monotonic() - started < 15:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        slow_done = time.monotonic() - started
        worker.stop()
        await run
        return late_done, slow_done

    late_done, slow_done = asyncio.run(main())
    assert texts(service, late) == ["fact number 0 about p"]
    assert texts(service) == ["fact number 0 about m"]
    assert late_done < 4.0 < slow_done, (late_done, slow_done)


def test_a_new_apps_queue_is_found_on_its_first_jobs_notification(
    queue: PostgresJobQueue, pg_url: str, service: PostgresMemoryService, monkeypatch: Any
) -> None:
    """The job notification (any queue's channel) starts the app-queue lookup: with the
    periodic lookup every 60 s and polling every 60 s, a new app's first job is done
    within seconds of its enqueue."""
    from langmem_trpc.queue import worker as worker_module

    monkeypatch.setattr(worker_module, "DISCOVER_EVERY", 60.0)
    late = UserKey("queue-late", "dave")

    async def main() -> float:
        worker = QueueWorker(pg_url, service, VerbatimExtractor(), poll_interval=60)
        ready = asyncio.Event()
        worker.on_ready = ready.set
        run = asyncio.create_task(worker.arun())
        await asyncio.wait_for(ready.wait(), 20)
        await asyncio.sleep(0.2)  # the first periodic lookup has run (and found nothing)
        started = time.monotonic()
        await queue.aenqueue(late, "t", history(1, prefix="d"))
        while not texts(service, late) and time.monotonic() - started < 20:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        worker.stop()
        await run
        return time.monotonic() - started

    elapsed = asyncio.run(main())
    assert texts(service, late) == ["fact number 0 about d"]
    assert elapsed < 10, elapsed


def test_a_bad_queue_or_app_name_is_refused(pg_url: str, service: PostgresMemoryService) -> None:
    from langmem_trpc.errors import ConfigurationError, InvalidUserKeyError

    with pytest.raises(ConfigurationError, match="without '@'"):
        PostgresJobQueue(pg_url, queue="a@b")
    with pytest.raises(InvalidUserKeyError, match="apps"):
        QueueWorker(pg_url, service, VerbatimExtractor(), apps=[""])


def test_stats_report_depth_oldest_age_and_per_user_lag(
    queue: PostgresJobQueue, service: PostgresMemoryService, pg_url: str
) -> None:
    bob = UserKey("queue-unit", "bob")
    queue.enqueue(USER, "t1", history(1))
    queue.enqueue(USER, "t2", history(1))
    queue.enqueue(bob, "t1", history(1))
    time.sleep(0.05)
    stats = queue.stats()
    assert stats.depth == 3 and stats.running == 0 and stats.failed == 0
    assert stats.oldest_pending_seconds is not None and stats.oldest_pending_seconds >= 0.05
    assert stats.per_user_lag == {"queue-unit/alice": 2, "queue-unit/bob": 1}
    assert stats.enqueued == 3
    drain(pg_url, service)
    after = queue.stats()
    assert (after.depth, after.oldest_pending_seconds, after.per_user_lag) == (0, None, {})
    assert after.succeeded == 3


def test_an_unreachable_database_fails_fast_and_is_counted() -> None:
    with PostgresJobQueue("postgresql://127.0.0.1:9/none", connect_timeout=0.5) as q:
        started = time.monotonic()
        with pytest.raises(BackendError):
            q.enqueue(USER, "t", history(1))
        assert time.monotonic() - started < 3.0
        assert q.counters()["producer_errors"] == 1


class FailOnce(VerbatimExtractor):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def extract(self, request: ExtractionRequest) -> list[MemoryOp]:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("model down")
        return super().extract(request)


def test_a_failed_job_is_retried_and_then_done(
    queue: PostgresJobQueue, pg_url: str, service: PostgresMemoryService
) -> None:
    queue.enqueue(USER, "t", history(2))
    extractor = FailOnce()
    drain(pg_url, service, extractor, retry_wait=0.0)
    assert extractor.calls == 2
    assert texts(service) == ["fact number 0 about m", "fact number 1 about m"]
    (job,) = jobs(pg_url)
    assert (job["status"], job["attempts"]) == ("succeeded", 2)  # procrastinate counts both runs


def test_a_retried_job_does_not_collide_with_the_threads_next_waiting_job(
    queue: PostgresJobQueue, pg_url: str, service: PostgresMemoryService
) -> None:
    """A running job clears its queueing lock, so its retry and a newer waiting job coexist."""
    queue.enqueue(USER, "t", history(2))

    class EnqueueThenFail(VerbatimExtractor):
        calls = 0

        def extract(self, request: ExtractionRequest) -> list[MemoryOp]:
            EnqueueThenFail.calls += 1
            if EnqueueThenFail.calls == 1:
                queue.enqueue(USER, "t", history(3))  # the thread's next job waits meanwhile
                raise RuntimeError("model down")
            return super().extract(request)

    worker = drain(pg_url, service, EnqueueThenFail(), retry_wait=0.0, stalled_after=4)
    assert texts(service) == sorted(f"fact number {i} about m" for i in range(3))
    assert {j["status"] for j in jobs(pg_url)} == {"succeeded"}
    # without the cleared lock the retry hits the unique index and the job stays 'doing'
    # until the stalled-job check puts it back
    assert worker.recovered == 0


def test_jobs_of_a_stalled_worker_are_put_back(
    queue: PostgresJobQueue, pg_url: str, service: PostgresMemoryService
) -> None:
    queue.enqueue(USER, "t", history(2))
    with psycopg.connect(pg_url, autocommit=True) as conn:
        dead = conn.execute(
            "INSERT INTO procrastinate_workers (last_heartbeat) VALUES (now() - interval '1 hour')"
            " RETURNING id"
        ).fetchone()
        assert dead is not None
        conn.execute("UPDATE procrastinate_jobs SET status = 'doing', worker_id = %s", (dead[0],))
    worker = QueueWorker(pg_url, service, VerbatimExtractor(), stalled_after=5)
    assert asyncio.run(_recover(worker)) == 1
    (job,) = jobs(pg_url)
    assert (job["status"], job["queueing_lock"]) == ("todo", None)
    drain(pg_url, service)
    assert len(texts(service)) == 2


async def _recover(worker: QueueWorker) -> int:
    async with worker.app.open_async():
        return await worker.recover_stalled()


def test_aenqueue_on_an_async_pool(pg_url: str, service: PostgresMemoryService) -> None:
    from psycopg_pool import AsyncConnectionPool

    async def main() -> EnqueueOutcome:
        pool = AsyncConnectionPool(pg_url, min_size=1, max_size=2, open=False)
        await pool.open()
        try:
            q = PostgresJobQueue(pool=pool)
            q.setup()
            first = await q.aenqueue(USER, "t", history(1))
            second = await q.aenqueue(USER, "t", history(2))
            assert first == EnqueueOutcome.QUEUED
            q.close()
            return second
        finally:
            await pool.close()

    assert asyncio.run(main()) == EnqueueOutcome.COLLAPSED
    assert payload_ids(jobs(pg_url)[0]) == ["m0", "m1"]


@pytest.mark.timeout(120)
def test_aenqueue_on_an_async_pool_queues_a_placeholder_for_a_big_message(
    pg_url: str, service: PostgresMemoryService
) -> None:
    from psycopg_pool import AsyncConnectionPool

    async def main() -> dict[str, int]:
        async with AsyncConnectionPool(pg_url, min_size=1, max_size=2, open=False) as pool:
            q = PostgresJobQueue(pool=pool, max_payload_bytes=CAP)
            q.setup()
            thread = [*history(1), big("big"), *history(2, 1)]
            assert await q.aenqueue(USER, "t", thread) == EnqueueOutcome.QUEUED
            q.close()
            return q.counters()

    assert asyncio.run(main())["oversized"] == 1
    drain(pg_url, service)
    assert texts(service) == ["fact number 0 about m", "fact number 1 about m"]


def test_aenqueue_without_an_async_pool_runs_off_the_loop(
    queue: PostgresJobQueue, pg_url: str
) -> None:
    assert asyncio.run(queue.aenqueue(USER, "t", history(1))) == EnqueueOutcome.QUEUED
    assert len(jobs(pg_url)) == 1


def test_messages_with_datetimes_in_additional_kwargs_are_queued(
    queue: PostgresJobQueue, pg_url: str, service: PostgresMemoryService
) -> None:
    """A host's `datetime` timestamp (not JSON) is queued as ISO text and still read as the time."""
    from datetime import datetime, timezone

    when = datetime(2024, 5, 1, 9, 30, tzinfo=timezone.utc)
    message = HumanMessage("I moved to Lisbon", id="d1", additional_kwargs={"timestamp": when})
    assert queue.enqueue(USER, "t", [message]) == EnqueueOutcome.QUEUED
    assert queue.counters()["producer_errors"] == 0
    drain(pg_url, service)
    (entry,) = service.read(USER)
    assert entry.memory.text == "I moved to Lisbon" and entry.memory.event_time == when


def test_a_delta_over_the_cap_is_queued_as_consecutive_anchored_jobs(
    pg_url: str, service: PostgresMemoryService
) -> None:
    pad = {"pad": "p" * 12_000}  # the payload's size, not the extracted text's
    thread = [
        HumanMessage(f"fact number {i}", id=f"m{i}", additional_kwargs=pad) for i in range(20)
    ]
    with PostgresJobQueue(pg_url, max_payload_bytes=CAP) as q:
        q.setup()
        q.enqueue(USER, "t", thread[:1])  # the thread's waiting job, older than the chunks
        assert q.enqueue(USER, "t", thread) == EnqueueOutcome.QUEUED
        queued = jobs(pg_url)
        assert len(queued) > 3
        assert payload_ids(queued[0]) == ["m0"]  # never replaced by a chunk
        chunks = [payload_ids(j) for j in queued[1:]]
        assert chunks[0][0] == "m0" and chunks[-1][-1] == "m19"
        for before, after in zip(chunks, chunks[1:], strict=False):
            assert after[0] == before[-1]  # each chunk is anchored on the one before it
        compact = [len(json.dumps(j["args"], separators=(",", ":")).encode()) for j in queued]
        assert max(compact) <= CAP
        drain(pg_url, service)
    entries = service.read(USER)
    assert len(entries) == 20
    cursor = service.get_cursor(USER, "t")
    assert cursor is not None and cursor.last_message_id == "m19"
    offsets = [j["args"]["offset"] for j in queued[1:]]
    assert offsets == [sum(len(c) - 1 for c in chunks[:k]) for k in range(len(chunks))]
    assert cursor.message_count == 20  # the thread's, not the last chunk's


def test_a_callers_pool_in_transaction_mode_commits_and_collapses(
    pg_url: str, service: PostgresMemoryService
) -> None:
    """A passed-in pool (not autocommit): the queueing-lock conflict rolls back to a savepoint."""
    from psycopg_pool import ConnectionPool

    with ConnectionPool(pg_url, min_size=1, max_size=1, open=True) as pool:
        q = PostgresJobQueue(pool=pool, service=service)
        q.setup()
        assert q.enqueue(USER, "t", history(1)) == EnqueueOutcome.QUEUED
        assert q.enqueue(USER, "t", history(3)) == EnqueueOutcome.COLLAPSED
        assert q.enqueue(USER, "t2", history(1)) == EnqueueOutcome.QUEUED
        q.close()
        assert not pool.closed  # the caller's pool stays open
    assert [payload_ids(j) for j in jobs(pg_url)] == [["m0", "m1", "m2"], ["m0"]]


def test_a_database_without_the_tables_says_which_setup_is_missing(pg_url: str) -> None:
    with PostgresJobQueue(pg_url) as q:
        with pytest.raises(BackendError, match="setup"):
            q.enqueue(USER, "t", history(1))
        assert q.counters()["producer_errors"] == 1


def test_app_name_is_the_connections_application_name(
    pg_url: str, service: PostgresMemoryService
) -> None:
    with PostgresJobQueue(pg_url, app_name="api-replica-7") as q:
        q.setup()
        q.enqueue(USER, "t", history(1))
        with psycopg.connect(pg_url) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'api-replica-7'"
            ).fetchone()
        assert row is not None and row[0] >= 1


def test_a_job_running_in_this_process_is_never_put_back_even_with_a_stale_heartbeat(
    queue: PostgresJobQueue, pg_url: str, service: PostgresMemoryService
) -> None:
    """After an outage a worker's own heartbeat is stale; its running jobs are still its own."""
    import threading

    release = threading.Event()

    class Blocking(VerbatimExtractor):
        def extract(self, request: ExtractionRequest) -> list[MemoryOp]:
            release.wait(30)
            return super().extract(request)

    queue.enqueue(USER, "t", history(1))
    worker = QueueWorker(pg_url, service, Blocking(), stalled_after=1, poll_interval=0.2)

    async def main() -> int:
        task = asyncio.create_task(worker.arun())
        while not any(j["status"] == "doing" for j in jobs(pg_url)):  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                "UPDATE procrastinate_workers SET last_heartbeat = now() - interval '1 hour'"
            )
        put_back = await worker.recover_stalled()
        release.set()
        while not any(j["status"] == "succeeded" for j in jobs(pg_url)):  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        worker.stop()
        await task
        return put_back

    assert asyncio.run(main()) == 0
    assert [j["status"] for j in jobs(pg_url)] == ["succeeded"]
    assert worker.recovered == 0


def test_pooled_connections_killed_by_a_server_restart_do_not_fail_the_next_enqueue(
    pg_url: str, service: PostgresMemoryService
) -> None:
    with PostgresJobQueue(pg_url, app_name="restarted-producer") as q:
        q.setup()
        q.enqueue(USER, "t1", history(1))
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = 'restarted-producer'"
            )
        assert q.enqueue(USER, "t2", history(1)) == EnqueueOutcome.QUEUED
        assert q.enqueue(USER, "t3", history(1)) == EnqueueOutcome.QUEUED
        assert q.counters()["producer_errors"] == 0
