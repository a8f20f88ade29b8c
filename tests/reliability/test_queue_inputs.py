"""Ids the worker cannot use are refused at its entry, naming the field (issue 31, item 13).

A lone surrogate in a thread id reached the lock striping (`fnv1a` encodes it) as a raw
`UnicodeEncodeError`; a NUL in a message id failed every attempt of its batch as if the
failure were transient, and was dead-lettered after three. Both are bad input: an
`InvalidInputError` naming the field, before anything runs or is written, on the
in-process worker, the queue's producer and the queue's worker.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from langchain_core.messages import HumanMessage

from langmem_trpc import AutoMemoryWorker, InMemoryMemoryService, UserKey, VerbatimExtractor
from langmem_trpc.errors import InvalidInputError
from langmem_trpc.extraction import JobStatus
from langmem_trpc.service.protocol import MemoryService

USER = UserKey("app", "alice")
BAD = ["\ud800", "a\udfffb", "\x00", "x\x00y", "m" * 513]
"""A lone surrogate (high, low), a NUL, an id over 512 characters."""


@pytest.fixture
def worker() -> Iterator[AutoMemoryWorker]:
    w = AutoMemoryWorker(InMemoryMemoryService(), VerbatimExtractor())
    yield w
    w.close()


@pytest.mark.parametrize("bad", BAD)
def test_a_bad_thread_id_is_a_field_error(worker: AutoMemoryWorker, bad: str) -> None:
    for call in (worker.process, worker.enqueue):
        with pytest.raises(InvalidInputError) as info:
            call(USER, bad, [HumanMessage("I live in Lisbon", id="m0")])
        assert info.value.field == "thread_id"


@pytest.mark.parametrize("bad", BAD)
def test_a_bad_message_id_is_refused_once_not_retried(worker: AutoMemoryWorker, bad: str) -> None:
    messages = [HumanMessage("I like tea", id="m0"), HumanMessage("I live in Lisbon", id=bad)]
    for _ in range(3):  # each try refused up front: no failed attempt, no dead letter
        with pytest.raises(InvalidInputError) as info:
            worker.process(USER, "t", messages)
        assert info.value.field == "messages[1].id"
    service = worker.service
    assert service.dead_letters() == []
    assert service.get_cursor(USER, "t") is None and service.read(USER) == []


IDS = st.text(
    st.characters(exclude_categories=()) | st.sampled_from(["\x00", "\ud800", "\udfff", " "]),
    min_size=1,
    max_size=20,
)
"""Any code point, lone surrogates and NUL included."""


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(thread_id=IDS, message_id=st.none() | IDS)
@example(thread_id="\ud800", message_id=None)
@example(thread_id="t", message_id="a\x00")
def test_any_ids_end_in_a_job_or_a_field_error(thread_id: str, message_id: str | None) -> None:
    """Fuzz: whatever the ids, the job runs or a field error names the id; never a raw
    error, never a failed job."""
    worker = AutoMemoryWorker(InMemoryMemoryService(), VerbatimExtractor())
    try:
        report = worker.process(USER, thread_id, [HumanMessage("I like tea", id=message_id)])
    except InvalidInputError as exc:
        assert exc.field in ("thread_id", "messages[0].id")
    else:
        assert report.status == JobStatus.COMPLETED, report.error
    finally:
        worker.close()


# -- the durable queue ---------------------------------------------------------------------


@pytest.fixture
def pg_service(pg_url: str) -> Iterator[MemoryService]:
    from langmem_trpc.backends.postgres import PostgresMemoryService
    from langmem_trpc.queue import PostgresJobQueue

    service = PostgresMemoryService(pg_url, pool_size=2)
    service.setup()
    with PostgresJobQueue(pg_url) as queue:
        queue.setup()
    yield service
    service.close()


@pytest.mark.postgres
def test_the_queue_refuses_bad_ids_and_its_worker_does_not_retry_them(
    pg_url: str, pg_service: MemoryService
) -> None:
    from langmem_trpc.queue import PostgresJobQueue, QueueWorker
    from langmem_trpc.queue._payload import JobPayload, app_queue, lock_keys
    from langmem_trpc.queue._stats import TASK_NAME
    from langmem_trpc.queue.producer import DEFER

    user = UserKey("app", uuid.uuid4().hex)
    with PostgresJobQueue(pg_url) as queue:
        with pytest.raises(InvalidInputError) as info:
            queue.enqueue(user, "t\ud800", [HumanMessage("I like tea", id="m0")])
        assert info.value.field == "thread_id"
        with pytest.raises(InvalidInputError) as info:
            queue.enqueue(user, "t", [HumanMessage("I like tea", id="m\x00")])
        assert info.value.field == "messages[0].id"
    # A job queued before the producer checked message ids (jsonb holds no NUL nor lone
    # surrogate, so an id over the length limit).
    long_id = (HumanMessage("I like tea", id="m" * 600),)
    args = JobPayload(user, "t", long_id).chunked_json(CAP)[0]
    lock, queueing = lock_keys("langmem", user, "t")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(DEFER, (app_queue("langmem", user.app_name), TASK_NAME, lock, queueing, args))
    QueueWorker(pg_url, pg_service, VerbatimExtractor(), poll_interval=0.2).run(drain=True)
    with psycopg.connect(pg_url) as conn:
        status, attempts, stored = conn.execute(
            "SELECT status::text, attempts, args FROM procrastinate_jobs"
        ).fetchone()
    assert (status, attempts) == ("failed", 1)  # bad input: no retry
    assert stored["thread"] == "t"
    assert pg_service.dead_letters() == [] and pg_service.get_cursor(user, "t") is None


CAP = 1_000_000
