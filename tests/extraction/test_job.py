"""Jobs against the durable cursor: overtaken jobs, per-user order, dead letters and retries."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from langmem_trpc import AutoMemoryWorker, UserKey
from langmem_trpc.errors import ExtractorBusyError
from langmem_trpc.extraction import JobStatus, VerbatimExtractor
from langmem_trpc.extraction.delta import advance_cursor
from langmem_trpc.extraction.job import JobSettings, run_job
from langmem_trpc.testing._wrap import DelegatingService
from langmem_trpc.types import DeadLetterStatus


def msg(i: int, text: str | None = None) -> HumanMessage:
    return HumanMessage(text or f"message number {i}", id=f"m{i}")


class Recording(VerbatimExtractor):
    """Records the ids of every message it is given; fails on "poison" while `poisoned`."""

    def __init__(self, delay: float = 0.0) -> None:
        super().__init__()
        self.delay = delay
        self.poisoned = True
        self.seen: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def extract(self, request):
        if self.poisoned and any("poison" in str(m.content) for m in request.messages):
            raise RuntimeError("content filter rejected the request")
        time.sleep(self.delay)
        with self.lock:
            self.seen.extend((request.user.user_id, str(m.id)) for m in request.messages)
        return super().extract(request)


# -- defect 1: overtaken jobs ---------------------------------------------------


def test_an_overtaken_job_is_nothing_new_and_the_cursor_never_moves_back(service, user):
    extractor = Recording()
    worker = AutoMemoryWorker(service, extractor)
    assert worker.process(user, "th", [msg(0), msg(1)]).status == JobStatus.COMPLETED
    older = worker.process(user, "th", [msg(0)])
    assert older.status == JobStatus.NOTHING_NEW and older.anchor == "covered"
    cursor = service.get_cursor(user, "th")
    assert cursor.last_message_id == "m1" and cursor.message_count == 2
    assert extractor.seen == [("alice", "m0"), ("alice", "m1")]
    assert worker.process(user, "th", []).status == JobStatus.NOTHING_NEW
    assert service.get_cursor(user, "th").message_count == 2
    newer = worker.process(user, "th", [msg(0), msg(1), msg(2)])
    assert newer.status == JobStatus.COMPLETED and newer.messages == 1


def test_a_rewritten_history_is_still_read_after_its_last_covered_message(service, user):
    extractor = Recording()
    worker = AutoMemoryWorker(service, extractor)
    worker.process(user, "th", [msg(i) for i in range(4)])
    summary = HumanMessage("so far", id="s", additional_kwargs={"lc_source": "summarization"})
    report = worker.process(user, "th", [summary, msg(3), msg(4)])
    assert report.status == JobStatus.COMPLETED and report.anchor == "rewritten"
    assert [i for _, i in extractor.seen] == ["m0", "m1", "m2", "m3", "m4"]
    stale = worker.process(user, "th", [msg(i) for i in range(3)])  # queued before the summary
    assert stale.status == JobStatus.NOTHING_NEW
    assert service.get_cursor(user, "th").message_count == 3  # the rewritten history's


def test_memories_keep_message_order_under_queue_overflow(service):
    """5 users x 6 growing jobs, workers=2, queue_size=4: sync fallbacks overtake queued jobs."""
    extractor = Recording(delay=0.01)
    users = [UserKey("app", f"u{i}") for i in range(5)]
    worker = AutoMemoryWorker(service, extractor, workers=2, queue_size=4).start()
    history: dict[UserKey, list[HumanMessage]] = defaultdict(list)
    for turn in range(6):
        for u in users:
            history[u].append(HumanMessage(f"{u.user_id} turn {turn}", id=f"{u.user_id}-{turn}"))
            worker.enqueue(u, "t", list(history[u]))
    assert worker.stop(timeout=30)
    for u in users:
        wanted = [f"{u.user_id}-{t}" for t in range(6)]
        assert [i for uid, i in extractor.seen if uid == u.user_id] == wanted
        stored = sorted(service.read(u), key=lambda e: (e.created_at, e.id))
        assert [e.text for e in stored] == [f"{u.user_id} turn {t}" for t in range(6)]
    assert worker.stats().jobs_failed == 0


# -- defect 4: dead letters -----------------------------------------------------


def test_a_poison_batch_is_dead_lettered_after_three_attempts(service, user):
    extractor = Recording()
    worker = AutoMemoryWorker(service, extractor)
    thread = [msg(0, "poison pill"), msg(1, "also in the batch")]
    assert worker.process(user, "t", thread).status == JobStatus.FAILED
    assert worker.process(user, "t", thread).status == JobStatus.FAILED
    assert service.get_cursor(user, "t") is None and service.dead_letters() == []
    third = worker.process(user, "t", thread)
    assert third.status == JobStatus.DEAD_LETTERED and len(third.dead_lettered) == 1
    (letter,) = service.dead_letters()
    assert letter.id == third.dead_lettered[0] and letter.status == DeadLetterStatus.DEAD
    assert (letter.thread_id, letter.user, letter.attempts) == ("t", user, 3)
    assert letter.message_ids == ["m0", "m1"] and "content filter" in letter.error
    assert [m["data"]["content"] for m in letter.messages] == ["poison pill", "also in the batch"]
    assert service.get_cursor(user, "t").message_count == 2  # moved past it
    later = worker.process(user, "t", [*thread, msg(2, "I live in Oslo")])
    assert later.status == JobStatus.COMPLETED and [i for _, i in extractor.seen] == ["m2"]
    stats = worker.stats()
    assert (stats.batches_dead_lettered, stats.jobs_dead_lettered, stats.jobs_failed) == (1, 1, 2)


class Busy(VerbatimExtractor):
    """Every call finds the user's extractor capacity taken (never attempted)."""

    def extract(self, request):
        raise ExtractorBusyError("user already holds max_calls_per_user calls")


def test_a_busy_extractor_is_not_a_failed_attempt(service, user):
    """A batch that never reached the model is retried, never dead-lettered."""
    worker = AutoMemoryWorker(service, Busy(), max_attempts=1)
    thread = [msg(0, "I live in Oslo")]
    for _ in range(3):
        report = worker.process(user, "t", thread)
        assert report.status == JobStatus.FAILED and "ExtractorBusyError" in report.error
    assert service.dead_letters() == [] and service.get_cursor(user, "t") is None
    assert worker.process(user, "t", thread).status == JobStatus.FAILED
    assert AutoMemoryWorker(service, Recording()).process(user, "t", thread).status == (
        JobStatus.COMPLETED
    )
    assert [e.text for e in service.read(user)] == ["I live in Oslo"]


def test_attempts_are_counted_in_the_backend_across_workers(service, user):
    thread = [msg(0, "poison")]
    for _ in range(2):
        assert AutoMemoryWorker(service, Recording()).process(user, "t", thread).error
    report = AutoMemoryWorker(service, Recording()).process(user, "t", thread)
    assert report.status == JobStatus.DEAD_LETTERED


def test_max_attempts_is_configurable_and_other_batches_still_extract(service, user):
    extractor = Recording()
    worker = AutoMemoryWorker(service, extractor, max_attempts=1, batch_messages=1)
    report = worker.process(user, "t", [msg(0, "fine"), msg(1, "poison"), msg(2, "fine too")])
    assert report.status == JobStatus.COMPLETED and len(report.dead_lettered) == 1
    assert report.batches == 2 and [i for _, i in extractor.seen] == ["m0", "m2"]
    assert service.dead_letters()[0].message_ids == ["m1"]


def test_only_an_extracted_batch_moves_the_cursors_extraction_time(service, user):
    """A finished batch stamps the cursor now; a dead-lettered batch and unread tool traffic
    move it on with the previous cursor's time (the claimed one, or the job's last)."""
    worker = AutoMemoryWorker(service, Recording(), max_attempts=1, batch_messages=1)
    thread = [msg(0, "I live in Oslo")]
    worker.process(user, "t", thread)
    first = service.get_cursor(user, "t").last_extracted_at
    assert first is not None
    thread.append(AIMessage("", id="call", tool_calls=[{"name": "f", "args": {}, "id": "c"}]))
    assert worker.process(user, "t", thread).status == JobStatus.NOTHING_NEW
    assert service.get_cursor(user, "t").message_count == 2  # moved past the tool call
    assert service.get_cursor(user, "t").last_extracted_at == first
    time.sleep(0.01)
    thread.append(msg(2, "poison"))
    assert worker.process(user, "t", thread).status == JobStatus.DEAD_LETTERED
    assert service.get_cursor(user, "t").message_count == 3
    assert service.get_cursor(user, "t").last_extracted_at == first
    thread += [msg(3, "I work in Bergen"), msg(4, "poison again")]
    report = worker.process(user, "t", thread)
    assert report.status == JobStatus.COMPLETED and len(report.dead_lettered) == 1
    cursor = service.get_cursor(user, "t")
    assert cursor.message_count == 5 and cursor.last_extracted_at > first
    assert cursor.last_extracted_at == report.cursor.last_extracted_at


def test_a_retried_dead_letter_is_extracted_by_the_threads_next_job(service, user):
    extractor = Recording()
    worker = AutoMemoryWorker(service, extractor, max_attempts=1)
    thread = [msg(0, "poison but worth keeping")]
    letter_id = worker.process(user, "t", thread).dead_lettered[0]
    assert worker.process(user, "t", thread).status == JobStatus.NOTHING_NEW  # not queued yet
    extractor.poisoned = False
    queued = service.retry_dead_letter(letter_id)
    assert queued is not None and queued.status == DeadLetterStatus.RETRY
    report = worker.process(user, "t", thread)  # nothing new, but the retry runs
    assert report.status == JobStatus.COMPLETED and report.retried == 1
    assert [e.text for e in service.read(user)] == ["poison but worth keeping"]
    assert service.dead_letters(status="done")[0].id == letter_id
    assert service.get_cursor(user, "t").pending_retries == 0
    assert worker.stats().dead_letters_retried == 1


def test_a_failed_retry_returns_the_letter_to_dead_with_one_more_attempt(service, user):
    worker = AutoMemoryWorker(service, Recording(), max_attempts=1)
    letter_id = worker.process(user, "t", [msg(0, "poison")]).dead_lettered[0]
    service.retry_dead_letter(letter_id)
    report = worker.process(user, "t", [msg(0, "poison"), msg(1, "new and fine")])
    assert report.status == JobStatus.COMPLETED and report.retried == 0
    (letter,) = service.dead_letters()
    assert letter.status == DeadLetterStatus.DEAD and letter.attempts == 2
    assert [e.text for e in service.read(user)] == ["new and fine"]


# -- claims -------------------------------------------------------------------------


def test_a_job_waits_for_another_owners_claim_and_reads_only_what_it_left(service, user):
    extractor = Recording()
    assert service.claim_thread(user, "t", "other-process", 30) is not None

    def other_process_finishes() -> None:
        time.sleep(0.3)
        cursor = advance_cursor("t", [msg(0)], None)
        assert service.save_progress(user, "t", "other-process", cursor=cursor)

    finisher = threading.Thread(target=other_process_finishes)
    finisher.start()
    report = AutoMemoryWorker(service, extractor).process(user, "t", [msg(0), msg(1)])
    finisher.join()
    assert report.status == JobStatus.COMPLETED and [i for _, i in extractor.seen] == ["m1"]


def test_the_claim_of_a_dead_job_expires_and_the_delta_is_extracted(service, user):
    extractor = Recording()
    assert service.claim_thread(user, "t", "killed-process", 0.3) is not None
    report = AutoMemoryWorker(service, extractor, job_timeout=5).process(user, "t", [msg(0)])
    assert report.status == JobStatus.COMPLETED and extractor.seen == [("alice", "m0")]


def test_a_thread_busy_past_the_deadline_fails_without_counting_an_attempt(service, user):
    assert service.claim_thread(user, "t", "slow-process", 60) is not None
    worker = AutoMemoryWorker(service, Recording(), job_timeout=0.3)
    report = worker.process(user, "t", [msg(0)])
    assert report.status == JobStatus.FAILED and "claimed by another job" in report.error
    service.release_thread(user, "t", "slow-process")
    claim = service.claim_thread(user, "t", "inspector", 5)
    assert claim is not None and claim.attempts == 0 and claim.cursor is None


class CountingService(DelegatingService):
    def __init__(self, inner):
        super().__init__(inner)
        self.calls: list[str] = []

    def _call(self, name, *args, **kwargs):
        self.calls.append(name)
        return super()._call(name, *args, **kwargs)


def test_without_the_peek_a_job_reads_the_cursor_only_under_its_claim(service, user):
    counting = CountingService(service)
    settings = JobSettings(peek_cursor=False)
    report = run_job(counting, Recording(), settings, user, "t", [msg(0), msg(1)])
    assert report.status == JobStatus.COMPLETED and "get_cursor" not in counting.calls
    assert counting.calls[0] == "claim_thread"
    counting.calls.clear()
    covered = run_job(counting, Recording(), settings, user, "t", [msg(0), msg(1)])
    assert covered.status == JobStatus.NOTHING_NEW and "get_cursor" not in counting.calls
    assert service.claim_thread(user, "t", "next-job", 5) is not None  # it gave the claim back
    counting.calls.clear()
    peeked = run_job(counting, Recording(), JobSettings(), user, "t", [msg(0), msg(1)])
    assert peeked.status == JobStatus.NOTHING_NEW and counting.calls == ["get_cursor"]


@pytest.mark.postgres
def test_dead_letter_then_retry_on_postgres(pg_url, user):
    from langmem_trpc.backends.postgres import PostgresMemoryService

    with PostgresMemoryService(pg_url) as service:
        service.setup()
        extractor = Recording()
        worker = AutoMemoryWorker(service, extractor, max_attempts=2)
        thread = [msg(0, "poison but worth keeping")]
        assert worker.process(user, "t", thread).status == JobStatus.FAILED
        dead = worker.process(user, "t", thread)
        assert dead.status == JobStatus.DEAD_LETTERED
        (letter,) = service.dead_letters()
        assert letter.attempts == 2 and letter.message_ids == ["m0"]
        extractor.poisoned = False
        service.retry_dead_letter(letter.id)
        retried = worker.process(user, "t", [*thread, msg(1, "I live in Oslo")])
        assert retried.status == JobStatus.COMPLETED and retried.retried == 1
        assert [i for _, i in extractor.seen] == ["m0", "m1"]
        assert service.dead_letters(status="done")[0].id == letter.id


async def _claim_lifecycle(service, user, call) -> None:
    """A lost claim writes nothing; a renewal keeps it; the final save releases it. `call`
    runs one service method (sync or its async twin)."""
    assert await call("claim_thread", user, "t", "job-1", 0.2) is not None
    assert await call("record_failure", user, "t", "job-1", "batch-a", "boom") == 1
    await asyncio.sleep(0.3)  # job-1's claim expires; job-2 takes the thread over
    assert await call("claim_thread", user, "t", "job-2", 30) is not None
    cursor = advance_cursor("t", [msg(0)], None)
    assert not await call("save_progress", user, "t", "job-1", cursor=cursor)
    assert await call("get_cursor", user, "t") is None  # the lost claim wrote no cursor
    assert await call("claim_thread", user, "t", "job-3", 30) is None  # job-2 still holds it
    assert await call("save_progress", user, "t", "job-2", cursor=cursor, ttl=30)
    assert await call("claim_thread", user, "t", "job-3", 30) is None  # renewed, not released
    assert await call("save_progress", user, "t", "job-2")  # final: release
    claim = await call("claim_thread", user, "t", "job-3", 30)
    assert claim is not None and claim.cursor.message_count == 1
    assert claim.attempts == 0 and claim.failed_batch is None  # the cursor cleared them
    await call("release_thread", user, "t", "job-3")
    assert await call("claim_thread", user, "t", "job-4", 30) is not None


@pytest.mark.postgres
def test_a_lost_claim_writes_nothing_and_a_save_renews_or_releases_on_postgres(pg_url, user):
    from langmem_trpc.backends.postgres import PostgresMemoryService

    async def sync_call(name, *args, **kwargs):
        return getattr(service, name)(*args, **kwargs)

    async def async_call(name, *args, **kwargs):
        return await getattr(service, "a" + name)(*args, **kwargs)

    with PostgresMemoryService(pg_url) as service:
        service.setup()
        asyncio.run(_claim_lifecycle(service, user, sync_call))
        asyncio.run(_claim_lifecycle(service, UserKey("app", "bob"), async_call))
