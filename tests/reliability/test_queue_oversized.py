"""Fuzz the durable queue with messages around its byte cap (issue 31, items 1 and 2).

A thread grows turn by turn; some messages are over `max_payload_bytes` (first message,
right after one anchor, in the middle, several in a row) or just around it. After every
turn it is enqueued; jobs run now or pile up first. What must hold: enqueue always ends,
no job is over the cap, the thread is extracted past every big message, each message the
queue carried is extracted once, and the queue extracts what the in-process worker
extracts from the same thread. The fast fuzzer runs the producer's own steps
(`select_messages`, `JobPayload.split`) and the queue worker's (`decode`, then
`AutoMemoryWorker.process` with the payload's offset) on an in-memory service; the slow
one runs `PostgresJobQueue` and `QueueWorker` on the suite's PostgreSQL.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langmem_trpc import AutoMemoryWorker, InMemoryMemoryService, UserKey, VerbatimExtractor
from langmem_trpc.queue._payload import MIN_PAYLOAD_BYTES, JobPayload, decode, select_messages
from langmem_trpc.service.protocol import MemoryService

CAP = MIN_PAYLOAD_BYTES
#: Characters of a message's text: small, near half the cap, just under, at and over it.
SIZES = [5, 2_000, CAP // 2 - 300, CAP - 700, CAP - 400, CAP - 150, CAP, CAP + 500, 3 * CAP]
MAX_TEXT = 8_000
"""The service's text limit: a longer message's memory is refused on both paths."""

#: One message: (size index, has an id, is the assistant's).
messages = st.tuples(st.sampled_from(range(len(SIZES))), st.booleans(), st.booleans())
#: Turns of one to three messages; after each, whether the queued jobs run now.
turns = st.lists(
    st.tuples(st.lists(messages, min_size=1, max_size=3), st.booleans()), min_size=1, max_size=4
)
BIG, AT_CAP, SMALL = len(SIZES) - 1, SIZES.index(CAP), 0
FIRST = [([(BIG, True, False), (SMALL, True, False)], True)]
AFTER_ONE_ANCHOR = [([(SMALL, True, False)], True), ([(BIG, False, False)], True)]
MIDDLE = [([(SMALL, False, False), (BIG, True, False), (AT_CAP, True, True)], False)]


def build(spec: list[tuple[list[tuple[int, bool, bool]], bool]]) -> list[tuple[bool, bool]]:
    """Per message of the thread: (it ends a turn, the queued jobs run after it)."""
    out: list[tuple[bool, bool]] = []
    for items, run in spec:
        out += [(i == len(items) - 1, run and i == len(items) - 1) for i in range(len(items))]
    return out


def message(number: int, size: int, has_id: bool, assistant: bool) -> BaseMessage:
    head = f"fact {number} "
    text = head + "word " * max(0, (size - len(head)) // 5)  # no token over the topic limit
    kind = AIMessage if assistant else HumanMessage
    return kind(text, id=f"m{number}" if has_id else None)


def thread_of(spec: list[tuple[list[tuple[int, bool, bool]], bool]]) -> list[BaseMessage]:
    flat = [m for items, _ in spec for m in items]
    return [message(n, SIZES[s], has_id, ai) for n, (s, has_id, ai) in enumerate(flat)]


def extracted(service: MemoryService, user: UserKey) -> list[str]:
    return sorted(e.text for e in service.read(user, limit=1_000))


def expected(thread: list[BaseMessage]) -> list[str]:
    """What VerbatimExtractor keeps of the user's messages: those within the text limit."""
    texts = [str(m.content).strip() for m in thread if m.type == "human"]
    return sorted(t for t in texts if len(t) <= MAX_TEXT)


FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.timeout(300)
@settings(FUZZ)
@given(spec=turns)
@example(spec=FIRST)
@example(spec=AFTER_ONE_ANCHOR)
@example(spec=MIDDLE)
def test_the_queue_steps_go_on_past_big_messages_like_the_in_process_worker(
    spec: list[tuple[list[tuple[int, bool, bool]], bool]],
) -> None:
    service = InMemoryMemoryService()
    worker = AutoMemoryWorker(service, VerbatimExtractor())
    queued, in_process = UserKey("app", "queued"), UserKey("app", "direct")
    thread = thread_of(spec)
    waiting: list[str] = []
    omitted: set[int] = set()
    try:
        for end, (turn_end, run) in enumerate(build(spec), start=1):
            if not turn_end:
                continue
            cursor = service.get_cursor(queued, "t")
            job = select_messages(JobPayload(queued, "t", tuple(thread[:end])), cursor)
            if job is not None:
                chunks = job.split(CAP)  # always ends (issue 31 item 1)
                assert all(len(t.encode()) <= CAP for t in chunks.texts)
                omitted |= {o.index for o in chunks.omitted}
                waiting += chunks.texts
            if run or end == len(thread):
                for text in waiting:
                    payload = decode(json.loads(text))
                    worker.process(queued, "t", payload.messages, offset=payload.offset)
                waiting.clear()
            worker.process(in_process, "t", thread[:end])  # the in-process path, same turns
    finally:
        worker.close()
    assert extracted(service, queued) == extracted(service, in_process) == expected(thread)
    assert all(len(str(thread[i].content)) > CAP // 2 for i in omitted)
    for user in (queued, in_process):
        cursor = service.get_cursor(user, "t")
        assert cursor is not None and cursor.message_count == len(thread)


@pytest.fixture(scope="module")
def pg_service(pg_module_url: str) -> Iterator[MemoryService]:
    from langmem_trpc.backends.postgres import PostgresMemoryService
    from langmem_trpc.queue import PostgresJobQueue

    service = PostgresMemoryService(pg_module_url, pool_size=4)
    service.setup()
    with PostgresJobQueue(pg_module_url) as queue:
        queue.setup()
    yield service
    service.close()


@pytest.mark.postgres
@pytest.mark.timeout(600)
@settings(FUZZ, max_examples=5)
@given(spec=turns)
@example(spec=FIRST)
@example(spec=AFTER_ONE_ANCHOR)
@example(spec=MIDDLE)
def test_the_postgres_queue_goes_on_past_big_messages(
    pg_module_url: str,
    pg_service: MemoryService,
    spec: list[tuple[list[tuple[int, bool, bool]], bool]],
) -> None:
    from langmem_trpc.queue import PostgresJobQueue, QueueWorker

    user = UserKey("fuzz", uuid.uuid4().hex)
    thread = thread_of(spec)
    drains = 0
    with PostgresJobQueue(pg_module_url, max_payload_bytes=CAP) as queue:
        for end, (turn_end, run) in enumerate(build(spec), start=1):
            if not turn_end:
                continue
            queue.enqueue(user, "t", thread[:end])  # never raises for a message's size
            if run and end < len(thread):
                _drain(pg_module_url, pg_service, QueueWorker)
                drains += 1
        _drain(pg_module_url, pg_service, QueueWorker)
        assert queue.counters()["rejected"] == queue.counters()["producer_errors"] == 0
    assert extracted(pg_service, user) == expected(thread)
    cursor = pg_service.get_cursor(user, "t")
    assert cursor is not None and cursor.message_count == len(thread)
    assert drains <= len(thread)


def _drain(url: str, service: MemoryService, worker_class: type) -> None:
    worker_class(url, service, VerbatimExtractor(), poll_interval=0.2).run(drain=True)
