"""QueueWorker's own behaviour against the suite's real PostgreSQL (one database per test)."""

from __future__ import annotations

import asyncio
import threading
import time

import psycopg
import pytest
from langchain_core.messages import HumanMessage

from langmem_trpc import UserKey
from langmem_trpc.backends.postgres import PostgresMemoryService
from langmem_trpc.extraction import ExtractionRequest, MemoryOp, VerbatimExtractor
from langmem_trpc.queue import PostgresJobQueue, QueueWorker

from .conftest import pending_jobs

USER = UserKey("queue-worker", "bob")


@pytest.mark.parametrize("delete_succeeded", [False, True])
def test_a_users_next_job_starts_when_the_running_one_ends_not_at_the_next_poll(
    queue_url: str, delete_succeeded: bool
) -> None:
    """procrastinate fetches again only on a new job or its polling interval; a job of a user
    whose previous job was running when the worker last fetched must not wait for the poll."""
    service = PostgresMemoryService(queue_url, pool_size=4)
    with PostgresJobQueue(queue_url) as queue:
        for n in range(3):  # one user, three threads: one lock, three queueing locks
            queue.enqueue(USER, f"t{n}", [HumanMessage(f"fact {n}", id=f"m{n}")])
    worker = QueueWorker(
        queue_url, service, VerbatimExtractor(), concurrency=2, poll_interval=60,
        delete_succeeded=delete_succeeded,
    )  # fmt: skip
    runner = threading.Thread(target=worker.run)
    started = time.monotonic()
    runner.start()
    try:
        while pending_jobs(queue_url) and time.monotonic() - started < 30:
            time.sleep(0.05)
        elapsed = time.monotonic() - started
        worker.stop()
        runner.join(30)
        texts = sorted(e.text for e in service.read(USER))
    finally:
        worker.stop()
        service.close()
    assert elapsed < 15, f"3 jobs of one user took {elapsed:.1f} s (the poll interval is 60 s)"
    with psycopg.connect(queue_url) as conn:
        statuses = conn.execute("SELECT status::text FROM procrastinate_jobs").fetchall()
    assert statuses == ([] if delete_succeeded else [("succeeded",)] * 3)
    assert texts == [f"fact {n}" for n in range(3)]


class _Slow(VerbatimExtractor):
    """Verbatim after a sleep; records how many calls ran at once."""

    def __init__(self) -> None:
        super().__init__()
        self.running = self.most = 0
        self.lock = threading.Lock()

    def extract(self, request: ExtractionRequest) -> list[MemoryOp]:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(1.0)
        with self.lock:
            self.running -= 1
        return super().extract(request)


def test_a_job_fetched_ahead_waits_for_a_thread_and_goes_back_at_stop(queue_url: str) -> None:
    """One job per 4 threads (at least one) is fetched ahead: it runs only once a thread is free
    (concurrency stays the number of jobs run at once), and a stop puts it back in the queue at
    once instead of running it."""
    service = PostgresMemoryService(queue_url, pool_size=4)
    extractor = _Slow()
    with PostgresJobQueue(queue_url) as queue:
        for n in range(2):  # two users: nothing but the thread count keeps them apart
            queue.enqueue(UserKey("queue-worker", f"u{n}"), "t", [HumanMessage(f"f{n}", id="m")])
    worker = QueueWorker(queue_url, service, extractor, concurrency=1, poll_interval=60)
    runner = threading.Thread(target=worker.run)
    runner.start()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (worker._waiting and extractor.running):
            time.sleep(0.02)
        assert worker._waiting and extractor.running, "no job was fetched ahead"
        worker.stop()
        runner.join(30)
    finally:
        worker.stop()
        service.close()
    assert extractor.most == 1
    with psycopg.connect(queue_url) as conn:
        statuses = conn.execute("SELECT status::text FROM procrastinate_jobs ORDER BY 1").fetchall()
    assert statuses == [("succeeded",), ("todo",)]


def test_procrastinates_connections_are_in_autocommit(queue_url: str) -> None:
    """procrastinate sends one statement per checkout: no BEGIN / COMMIT round trips around it."""
    service = PostgresMemoryService(queue_url, pool_size=1)
    worker = QueueWorker(queue_url, service, VerbatimExtractor())

    async def check() -> tuple[bool, str]:
        async with worker.app.open_async(), worker.app.connector.pool.connection() as conn:
            status = conn.info.transaction_status.name
            return conn.autocommit, status

    try:
        assert asyncio.run(check()) == (True, "IDLE")
    finally:
        service.close()


def test_a_drain_that_ends_within_one_poll_still_says_ready(queue_url: str) -> None:
    """`worker --drain` on an empty queue registers, finds nothing and stops in a few ms:
    quicker than the readiness poll, which used to be cancelled before it announced."""
    service = PostgresMemoryService(queue_url, pool_size=1)
    readies: list[int] = []
    worker = QueueWorker(
        queue_url, service, VerbatimExtractor(), on_ready=lambda: readies.append(1)
    )
    try:
        for _ in range(5):
            worker.run(drain=True)
    finally:
        service.close()
    assert len(readies) == 5


def test_an_on_ready_callback_that_raises_does_not_stop_the_worker(queue_url: str) -> None:
    """`on_ready` runs as an event-loop callback: its error is logged and the run goes on."""
    service = PostgresMemoryService(queue_url, pool_size=1)
    with PostgresJobQueue(queue_url) as queue:
        queue.enqueue(USER, "t", [HumanMessage("fact", id="m")])

    def broken() -> None:
        raise RuntimeError("a broken readiness probe")

    worker = QueueWorker(queue_url, service, VerbatimExtractor(), on_ready=broken)
    try:
        worker.run(drain=True)
        assert [e.text for e in service.read(USER)] == ["fact"]
    finally:
        service.close()
