"""Backfill from real LangGraph checkpointers: identity, message clocks, idempotence, live runs."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

import langmem_trpc
from langmem_trpc import (
    AutoMemoryWorker,
    InMemoryMemoryService,
    LLMExtractor,
    MemoryCheckpointer,
    UserKey,
    VerbatimExtractor,
)
from langmem_trpc.extraction import ExtractionRequest
from langmem_trpc.history import HistoryThread, read_checkpointer
from langmem_trpc.testing import ScriptedChatModel

from ._history import conversation, echo_graph, put_history

USER = UserKey("app", "u1")
IDENTITY = {"user_id": "u1", "app_name": "app"}
DAYS = ["2025-03-01", "2025-03-02", "2025-03-20"]


def texts(service: Any, user: UserKey = USER) -> list[str]:
    return sorted(e.memory.text for e in service.read(user))


def event_days(service: Any, user: UserKey = USER) -> dict[str, str]:
    return {e.memory.text: e.memory.event_time.date().isoformat() for e in service.read(user)}


class Recording(VerbatimExtractor):
    """The verbatim extractor, remembering each request's reference time and messages."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[ExtractionRequest] = []

    def extract(self, request: ExtractionRequest) -> list[Any]:
        self.requests.append(request)
        return super().extract(request)


def test_identity_from_the_runs_config_and_times_from_checkpoints() -> None:
    saver = InMemorySaver()
    put_history(saver, "t1", conversation("t1", DAYS), IDENTITY)
    (thread,) = read_checkpointer(saver)
    assert isinstance(thread, HistoryThread) and thread.user == USER
    assert [m.additional_kwargs["timestamp"][:10] for m in thread.messages] == [
        d for d in DAYS for _ in (0, 1)
    ]
    service, extractor = InMemoryMemoryService(), Recording()
    report = langmem_trpc.backfill(saver, service, extractor)
    assert report.ok and report.added == 3 and report.messages == 6
    assert report.batches == 3  # 2025-03-01 / -02 / -20: three sittings past the 6 h gap
    assert event_days(service) == {"t1 note 0": DAYS[0], "t1 note 1": DAYS[1], "t1 note 2": DAYS[2]}
    times = [r.reference_time.date().isoformat() for r in extractor.requests]
    assert times == DAYS  # each batch on its own clock, not today


def test_a_message_s_own_timestamp_wins_over_the_checkpoint_ts() -> None:
    saver = InMemorySaver()
    own = HumanMessage("booked", id="b1", additional_kwargs={"timestamp": "2024-12-24T08:00:00Z"})
    put_history(
        saver, "t1", [("2025-03-01T10:00:00+00:00", [own, AIMessage("ok", id="b2")])], IDENTITY
    )
    service = InMemoryMemoryService()
    langmem_trpc.backfill(saver, service, VerbatimExtractor())
    assert event_days(service) == {"booked": "2024-12-24"}


def test_identity_from_a_mapping_function_else_skipped() -> None:
    saver = InMemorySaver()
    put_history(saver, "acme-42-chat", conversation("c", DAYS[:1]))
    service = InMemoryMemoryService()
    skipped = langmem_trpc.backfill(saver, service, VerbatimExtractor())
    assert skipped.threads == 0 and [s.thread_id for s in skipped.skipped] == ["acme-42-chat"]

    def identity(thread_id: str, metadata: Any) -> UserKey:
        return UserKey("acme", thread_id.split("-")[1])

    report = langmem_trpc.backfill(saver, service, VerbatimExtractor(), identity=identity)
    assert report.added == 1 and texts(service, UserKey("acme", "42")) == ["c note 0"]


def test_real_runs_each_message_at_its_first_checkpoint_and_reruns_extract_nothing() -> None:
    saver = InMemorySaver()
    graph = echo_graph(saver)
    config: Any = {"configurable": {"thread_id": "t1", **IDENTITY}}
    for text in ("I live in Porto", "I have a cat"):
        graph.invoke({"messages": [HumanMessage(text)]}, config)
    history = list(saver.list({"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}))
    first: dict[str, str] = {}
    for item in reversed(history):
        for m in item.checkpoint["channel_values"].get("messages", []):
            first.setdefault(m.id, item.checkpoint["ts"])
    (thread,) = read_checkpointer(saver)
    assert {m.id: m.additional_kwargs["timestamp"] for m in thread.messages} == {
        k: datetime.fromisoformat(v).isoformat() for k, v in first.items()
    }
    service = InMemoryMemoryService()
    assert langmem_trpc.backfill(saver, service, VerbatimExtractor()).added == 2
    again = langmem_trpc.backfill(saver, service, VerbatimExtractor())
    assert (again.added, again.messages, again.threads_nothing_new) == (0, 0, 1)
    assert texts(service) == ["I have a cat", "I live in Porto"]


def test_relative_dates_resolve_on_the_message_s_clock() -> None:
    saver = InMemorySaver()
    turn = [HumanMessage("I moved to Lisbon last week", id="m1"), AIMessage("Nice!", id="m2")]
    put_history(saver, "t1", [("2025-03-14T09:00:00+00:00", turn)], IDENTITY)
    model = ScriptedChatModel(
        default=AIMessage("", tool_calls=[{"name": "nothing_to_remember", "args": {}, "id": "c1"}])
    )
    langmem_trpc.backfill(saver, InMemoryMemoryService(), LLMExtractor(model))
    (sent,) = model.calls
    assert "Today's date is 2025-03-14" in str(sent[0].content)
    assert "2025-03-14T09:00:00+00:00" in str(sent[1].content)


def test_backfill_and_live_runs_on_one_thread_never_extract_a_message_twice() -> None:
    inner, service = InMemorySaver(), InMemoryMemoryService()
    extractor = Recording()
    worker = AutoMemoryWorker(service, extractor)
    live, plain = echo_graph(MemoryCheckpointer(inner, worker)), echo_graph(inner)
    config: Any = {"configurable": {"thread_id": "t1", **IDENTITY}}
    live.invoke({"messages": [HumanMessage("one")]}, config)  # the hook extracts "one"
    plain.invoke({"messages": [HumanMessage("two")]}, config)  # before the plugin: not extracted
    langmem_trpc.backfill(inner, service, extractor)  # only "two"
    live.invoke({"messages": [HumanMessage("three")]}, config)  # only "three"
    assert langmem_trpc.backfill(inner, service, extractor).messages == 0
    worker.close()
    seen = [m.content for r in extractor.requests for m in r.messages if m.type == "human"]
    assert seen == ["one", "two", "three"]
    assert texts(service) == ["one", "three", "two"]


def test_sqlite_saver_file(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "checkpoints.db", check_same_thread=False)
    saver = SqliteSaver(conn)
    put_history(saver, "t1", conversation("t1", DAYS), IDENTITY)
    put_history(
        saver, "t2", conversation("t2", ["2025-01-05"]), {"user_id": "u2", "app_name": "app"}
    )
    service = InMemoryMemoryService()
    report = langmem_trpc.backfill(saver, service, VerbatimExtractor(), concurrency=2)
    assert (report.threads, report.added) == (2, 4)
    assert event_days(service, UserKey("app", "u2")) == {"t2 note 0": "2025-01-05"}
    assert langmem_trpc.backfill(saver, service, VerbatimExtractor()).added == 0


@pytest.mark.postgres
def test_postgres_saver_into_postgres_memories(pg_url: str) -> None:
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(pg_url) as saver:
        saver.setup()
        put_history(saver, "t1", conversation("t1", DAYS), IDENTITY)
        with langmem_trpc.open(pg_url) as service:
            report = langmem_trpc.backfill(saver, service, VerbatimExtractor())
            assert report.ok and report.added == 3
            assert event_days(service)["t1 note 2"] == DAYS[2]
            assert langmem_trpc.backfill(saver, service, VerbatimExtractor()).added == 0


async def test_abackfill_reads_with_alist() -> None:
    saver = InMemorySaver()
    put_history(saver, "t1", conversation("t1", DAYS[:2]), IDENTITY)
    service = InMemoryMemoryService()
    report = await langmem_trpc.abackfill(saver, service, VerbatimExtractor())
    assert report.added == 2 and texts(service) == ["t1 note 0", "t1 note 1"]


def test_dry_run_counts_and_writes_nothing() -> None:
    saver = InMemorySaver()
    put_history(saver, "t1", conversation("t1", DAYS), IDENTITY)
    service = InMemoryMemoryService()
    model = ScriptedChatModel()
    report = langmem_trpc.backfill(saver, service, LLMExtractor(model), dry_run=True)
    assert (report.threads, report.messages, report.batches) == (1, 6, 3)
    assert report.estimated_model_calls == 3 and report.estimated_input_tokens > 0
    assert model.calls == [] and service.read(USER) == [] and service.get_cursor(USER, "t1") is None


def test_since_until_and_users_select_threads() -> None:
    saver = InMemorySaver()
    put_history(saver, "old", conversation("old", ["2024-06-01"]), IDENTITY)
    put_history(saver, "new", conversation("new", ["2025-06-01"]), IDENTITY)
    put_history(
        saver, "other", conversation("other", ["2025-06-01"]), {"user_id": "u2", "app_name": "app"}
    )
    service = InMemoryMemoryService()
    since = datetime(2025, 1, 1, tzinfo=timezone.utc)
    report = langmem_trpc.backfill(saver, service, VerbatimExtractor(), since=since, users=["u1"])
    assert report.threads == 1 and texts(service) == ["new note 0"]


def test_one_sitting_is_cut_at_the_batch_size() -> None:
    saver = InMemorySaver()
    day = [f"2025-03-01T10:{m:02d}:00+00:00" for m in range(0, 50, 10)]
    turns, messages = [], []
    for i, ts in enumerate(day):
        messages = [*messages, HumanMessage(f"fact {i}", id=f"h{i}"), AIMessage("ok", id=f"a{i}")]
        turns.append((ts, messages))
    put_history(saver, "t1", turns, IDENTITY)
    extractor = Recording()
    report = langmem_trpc.backfill(saver, InMemoryMemoryService(), extractor, batch_messages=4)
    assert report.batches == 3 and [len(r.messages) for r in extractor.requests] == [4, 4, 2]
