"""Faults: backend outages, slow extractors, full queues, shutdown under load.

The backend is real (SQLite, and the in-memory reference); the outage is a
switch in front of it (`FaultyService`) that fails every call the way a dead
connection does. The PostgreSQL server stop/start variant is in
test_postgres_restart.py; the process-kill variant in test_crash.py.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from langmem_trpc import (
    AutoMemoryWorker,
    InMemoryMemoryService,
    MemoryCheckpointer,
    MemoryPreloadMiddleware,
    UserKey,
    VerbatimExtractor,
    create_memory_tools,
)
from langmem_trpc.extraction import EnqueueResult, ExtractionRequest, JobStatus, MemoryOp
from langmem_trpc.integration.preload import BLOCK_BEGIN
from langmem_trpc.service.protocol import MemoryService
from langmem_trpc.testing import HashingEmbeddings, ScriptedChatModel, tool_call

from .conftest import SECRET_WORD, FaultyService

ALICE = UserKey("app", "alice")


def _backend(kind: str, tmp_path: Path) -> MemoryService:
    if kind == "sqlite":
        from langmem_trpc.backends.sqlite import SQLiteMemoryService

        return SQLiteMemoryService(tmp_path / "m.db", embeddings=HashingEmbeddings())
    return InMemoryMemoryService(embeddings=HashingEmbeddings())


def _agent(
    service: MemoryService, worker: AutoMemoryWorker, model: ScriptedChatModel, saver: Any
) -> Any:
    return create_agent(
        model,
        tools=create_memory_tools(service),
        middleware=[MemoryPreloadMiddleware(service, preload=10)],
        checkpointer=MemoryCheckpointer(saver, worker),
    )


def _search_then_answer(answer: str) -> list[Any]:
    return [AIMessage("", tool_calls=[tool_call("memory_search", {"query": "go version"})]), answer]


def _live_texts(service: MemoryService, user: UserKey) -> list[str]:
    return sorted(e.text for e in service.read(user))


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("wrap_errors", [False, True], ids=["raw-driver-error", "backend-error"])
def test_outage_during_a_run_then_recovery(
    kind: str, wrap_errors: bool, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Preload, tools, hook and worker during an outage; the next run after recovery catches up."""
    inner = _backend(kind, tmp_path)
    service = FaultyService(inner, wrap_errors=wrap_errors)
    inner.add(ALICE, "Production runs Go 1.23")  # something preload would inject
    model = ScriptedChatModel(replies=[*_search_then_answer("ok"), *_search_then_answer("ok")])
    config = {"configurable": {"thread_id": "t1", "app_name": "app", "user_id": "alice"}}
    saver = InMemorySaver()
    with AutoMemoryWorker(service, VerbatimExtractor(), job_timeout=5) as worker:
        agent = _agent(service, worker, model, saver)
        service.down = True
        caplog.set_level(logging.INFO)
        result = agent.invoke({"messages": [HumanMessage("We moved to Go 1.24")]}, config)
        worker.stop(timeout=5)
        # The run completed; the tool call became an error message the model saw.
        tool_messages = [m for m in result["messages"] if isinstance(m, ToolMessage)]
        assert len(tool_messages) == 1 and tool_messages[0].status == "error"
        assert "unavailable" in str(tool_messages[0].content)
        assert result["messages"][-1].content == "ok"
        # Preload injected nothing.
        assert all(BLOCK_BEGIN not in str(m) for call in model.calls for m in call)
        # The job failed; the cursor did not move.
        stats = worker.stats()
        assert stats.jobs_failed >= 1 and stats.memories_added == 0
        assert inner.get_cursor(ALICE, "t1") is None
        # Nothing the model saw carries the secret.
        seen = " ".join(str(m.content) for call in model.calls for m in call)
        assert SECRET_WORD not in seen and SECRET_WORD not in str(tool_messages[0].content)
        # Logs are checked against a real PostgreSQL in test_postgres_restart.py: here the
        # synthetic driver error carries the DSN on purpose and is logged (WARNING, traceback).

    service.down = False
    with AutoMemoryWorker(service, VerbatimExtractor(), job_timeout=5) as worker:
        agent = _agent(service, worker, model, saver)
        result = agent.invoke({"messages": [HumanMessage("And staging runs Go 1.22")]}, config)
        assert worker.stop(timeout=5)
    # The second run's job covered the first run's delta too: both turns, once each.
    texts = _live_texts(inner, ALICE)
    assert texts == sorted(
        ["Production runs Go 1.23", "We moved to Go 1.24", "And staging runs Go 1.22"]
    )
    assert inner.get_cursor(ALICE, "t1") is not None
    # The preload of the second run worked again.
    assert any(BLOCK_BEGIN in str(m.content) for call in model.calls[2:] for m in call)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize(
    "failing",
    [("get_cursor",), ("search", "read"), ("add",), ("save_progress",), ("search",)],
    ids=["cursor-read", "existing-memories", "write", "cursor-write", "search-only"],
)
def test_worker_outage_at_each_step_leaves_the_cursor_then_catches_up(
    kind: str, failing: tuple[str, ...], tmp_path: Path
) -> None:
    """Whichever call dies, the job fails cleanly and a retry ends in the uninterrupted state.

    A search-only failure is absorbed by design (recent memories stand in, reconcile keeps
    the add), so that job completes; every other outage fails the job and keeps the cursor.
    """
    inner = _backend(kind, tmp_path)
    service = FaultyService(inner)
    service.down, service.down_for = True, set(failing)
    messages: list[BaseMessage] = [
        HumanMessage("I live in Lyon", id="m1"),
        AIMessage("Noted", id="m2"),
        HumanMessage("My cat is called Tom", id="m3"),
    ]
    from langmem_trpc import LLMExtractor

    def extraction(msgs: list[BaseMessage]) -> AIMessage:
        return AIMessage(
            "",
            tool_calls=[
                tool_call("memory_add", {"memory": "Lives in Lyon"}),
                tool_call("memory_add", {"memory": "Has a cat called Tom"}),
            ],
        )

    extractor = LLMExtractor(ScriptedChatModel(replies=[], default=extraction))
    worker = AutoMemoryWorker(service, extractor, job_timeout=5)
    report = worker.process(ALICE, "t", messages)
    if failing == ("search",):
        assert report.status == JobStatus.COMPLETED
    else:
        assert report.status == JobStatus.FAILED
        assert inner.get_cursor(ALICE, "t") is None
        service.down = False
        report = worker.process(ALICE, "t", messages)
        assert report.status == JobStatus.COMPLETED
    assert _live_texts(inner, ALICE) == ["Has a cat called Tom", "Lives in Lyon"]
    assert worker.process(ALICE, "t", messages).status == JobStatus.NOTHING_NEW


class SlowFor:
    """An extractor that hangs for one user and is quick for everyone else."""

    uses_existing = False

    def __init__(self, slow_user: str, seconds: float) -> None:
        self.slow_user, self.seconds = slow_user, seconds
        self.release = threading.Event()

    def extract(self, request: ExtractionRequest) -> list[MemoryOp]:
        if request.user.user_id == self.slow_user:
            self.release.wait(self.seconds)
        return [
            MemoryOp.add(f"{request.user.user_id} said {m.content}", verbatim=True)
            for m in request.messages
        ]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_slow_extractor_times_out_cleanly_and_others_are_served(kind: str, tmp_path: Path) -> None:
    service = _backend(kind, tmp_path)
    extractor = SlowFor("slow", seconds=10)
    worker = AutoMemoryWorker(service, extractor, workers=1, job_timeout=0.3).start()
    slow = UserKey("app", "slow")
    started = time.monotonic()
    assert worker.enqueue(slow, "t", [HumanMessage("hello", id="h")]) == EnqueueResult.QUEUED
    others = [UserKey("app", f"u{i}") for i in range(5)]
    for user in others:
        worker.enqueue(user, "t", [HumanMessage("hi", id="h")])
    assert worker.stop(timeout=10)
    elapsed = time.monotonic() - started
    extractor.release.set()
    stats = worker.stats()
    assert stats.jobs_timed_out == 1 and stats.jobs_failed == 1
    assert elapsed < 3, f"other users waited {elapsed:.1f}s behind a hung extractor"
    assert service.get_cursor(slow, "t") is None and service.count(slow) == 0
    for user in others:
        assert _live_texts(service, user) == [f"{user.user_id} said hi"]
    # The extractor recovers: the same delta is extracted on the next run.
    worker2 = AutoMemoryWorker(service, extractor, job_timeout=5)
    assert worker2.process(slow, "t", [HumanMessage("hello", id="h")]).status == JobStatus.COMPLETED
    assert _live_texts(service, slow) == ["slow said hello"]


class Sleepy:
    uses_existing = False

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def extract(self, request: ExtractionRequest) -> list[MemoryOp]:
        time.sleep(self.seconds)
        return [
            MemoryOp.add(f"{request.thread_id}: {m.content}", verbatim=True)
            for m in request.messages
        ]


def _expected(service: MemoryService, users: list[UserKey], threads: int) -> int:
    missing = 0
    for user in users:
        texts = set(_live_texts(service, user))
        for t in range(threads):
            missing += f"t{t}: turn of {user.user_id} in t{t}" not in texts
    return missing


@pytest.mark.parametrize("on_full", ["sync", "defer"])
def test_queue_full_loses_no_delta(on_full: str, tmp_path: Path) -> None:
    """A tiny queue and a slow extractor: every delta ends up stored (sync now, defer next run)."""
    service = _backend("sqlite", tmp_path)
    users = [UserKey("app", f"u{i}") for i in range(8)]
    worker = AutoMemoryWorker(
        service, Sleepy(0.02), workers=1, queue_size=2, on_full=on_full, job_timeout=5
    ).start()
    results: list[EnqueueResult] = []
    lock = threading.Lock()

    def submit(user: UserKey) -> None:
        for t in range(3):
            message = HumanMessage(f"turn of {user.user_id} in t{t}", id=f"{user.user_id}-{t}")
            result = worker.enqueue(user, f"t{t}", [message])
            with lock:
                results.append(result)

    threads = [threading.Thread(target=submit, args=(u,)) for u in users]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert worker.stop(timeout=30)
    counts = {r.value: results.count(r) for r in set(results)}
    assert counts.get("queued", 0) < len(results), "the queue never filled: the test proves nothing"
    if on_full == "defer":
        # Deferred deltas wait for the thread's next run: replay every thread once.
        for user in users:
            for t in range(3):
                message = HumanMessage(f"turn of {user.user_id} in t{t}", id=f"{user.user_id}-{t}")
                worker.process(user, f"t{t}", [message])
    assert _expected(service, users, 3) == 0
    for user in users:  # no duplicates either
        texts = _live_texts(service, user)
        assert len(texts) == len(set(texts)) == 3


def test_stopped_worker_runs_jobs_in_the_caller(tmp_path: Path) -> None:
    service = _backend("sqlite", tmp_path)
    worker = AutoMemoryWorker(service, VerbatimExtractor()).start()
    worker.stop()
    result = worker.enqueue(ALICE, "t", [HumanMessage("late message", id="x")])
    assert result == EnqueueResult.RAN_SYNC
    assert _live_texts(service, ALICE) == ["late message"]


def test_graceful_stop_drains_the_queue(tmp_path: Path) -> None:
    service = _backend("sqlite", tmp_path)
    users = [UserKey("app", f"u{i}") for i in range(20)]
    worker = AutoMemoryWorker(service, Sleepy(0.01), workers=2, queue_size=100).start()
    for user in users:
        for t in range(3):
            worker.enqueue(user, f"t{t}", [HumanMessage(f"turn of {user.user_id} in t{t}", id="m")])
    assert worker.stop(timeout=30) is True
    stats = worker.stats()
    assert stats.jobs_enqueued == 60 and stats.jobs_run == 60 and stats.queue_depth == 0
    assert _expected(service, users, 3) == 0


def test_stop_timeout_reports_unfinished_jobs_and_loses_none(tmp_path: Path) -> None:
    """`stop()` returns False and the queue depth says how many jobs are still pending;
    their cursors did not move, so whatever never runs is re-read by the thread's next run."""
    service = _backend("sqlite", tmp_path)
    users = [UserKey("app", f"u{i}") for i in range(10)]
    worker = AutoMemoryWorker(service, Sleepy(0.1), workers=1, queue_size=100).start()
    for user in users:
        worker.enqueue(user, "t0", [HumanMessage(f"turn of {user.user_id} in t0", id="m")])
    assert worker.stop(timeout=0.25) is False
    stats = worker.stats()
    pending = stats.queue_depth
    assert pending > 0 and stats.jobs_run + pending + 1 >= 10  # +1: the job in flight
    unfinished = [u for u in users if service.get_cursor(u, "t0") is None]
    assert len(unfinished) >= pending
    # Simulate the process exiting now: the unfinished threads are re-read on their next run.
    replay = AutoMemoryWorker(service, VerbatimExtractor())
    for user in unfinished:
        replay.process(user, "t0", [HumanMessage(f"turn of {user.user_id} in t0", id="m")])
    time.sleep(1.2)  # let the abandoned drain finish too: still no duplicates
    for user in users:
        texts = _live_texts(service, user)
        assert len(set(texts)) == len(texts) >= 1


def test_many_overflow_jobs_from_an_event_loop_do_not_starve(tmp_path: Path) -> None:
    """Regression: overflow jobs shared the extractor's thread pool and starved their own
    extractions (63 of 80 jobs timed out, stop() returned False). Now they all complete."""
    service = InMemoryMemoryService()
    worker = AutoMemoryWorker(service, Sleepy(0.05), workers=1, queue_size=1, job_timeout=5).start()
    users = [UserKey("app", f"u{i}") for i in range(80)]

    async def flood() -> list[EnqueueResult]:
        return [
            worker.enqueue(u, "t0", [HumanMessage(f"turn of {u.user_id} in t0", id="m")])
            for u in users
        ]

    import asyncio

    results = asyncio.run(flood())
    assert results.count(EnqueueResult.OVERFLOW) > 40
    assert worker.stop(timeout=30) is True
    stats = worker.stats()
    assert stats.jobs_failed == 0 and stats.jobs_run == 80
    assert _expected(service, users, 1) == 0
