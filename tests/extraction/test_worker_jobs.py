"""End-to-end jobs through AutoMemoryWorker.process: upgrade, paraphrase, execution rules, cursor on failure."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from langmem_trpc import (
    AutoMemoryWorker,
    BackendError,
    InMemoryMemoryService,
    Kind,
    LLMExtractor,
    Operation,
    SearchOptions,
    VerbatimExtractor,
)
from langmem_trpc.extraction import JobStatus, MemoryOp
from langmem_trpc.testing import ScriptedChatModel, tool_call

from .conftest import Crash, FlakyService

UPGRADE = [HumanMessage("We upgraded production to Go 1.24", id="h1")]


def calls(*items):
    return AIMessage("", tool_calls=list(items))


def worker_for(service, *replies, **kw):
    model = ScriptedChatModel(replies=list(replies))
    return AutoMemoryWorker(service, LLMExtractor(model), **kw), model


@pytest.mark.parametrize("proposal", ["add", "update"])
def test_production_upgrade_supersedes_and_keeps_the_old_version(service, user, proposal):
    old = service.add(
        user,
        "The user's production environment runs Go 1.23",
        topics=["production"],
        valid_from="2026-01-05",
    )
    if proposal == "add":  # reconcile matches it (update tier): signal 1
        call = tool_call("memory_add", {"memory": "The user's production environment runs Go 1.24"})
    else:  # the model names it: signal 1
        call = tool_call(
            "memory_update",
            {"memory_id": old.id, "memory": "The user's production environment runs Go 1.24"},
        )
    worker, _ = worker_for(service, calls(call))
    said = datetime(2026, 7, 20, 9, 30, tzinfo=timezone.utc)
    upgrade = [HumanMessage(UPGRADE[0].content, id="h1", additional_kwargs={"timestamp": said})]
    report = worker.process(user, "thread-1", upgrade)
    assert report.status == JobStatus.COMPLETED and report.superseded == 1
    (entry,) = service.read(user)  # current only
    assert entry.id != old.id and "Go 1.24" in entry.text and entry.valid_from == said
    closed = service.get(user, old.id)  # both stored: the old version closed, not overwritten
    assert closed.superseded_by == entry.id and closed.valid_to == said and "1.23" in closed.text
    before = SearchOptions(as_of="2026-06-01")
    assert [e.text for e in service.search(user, "production Go", before)] == [closed.text]
    after = SearchOptions(as_of="2026-08-01")
    assert [e.id for e in service.search(user, "production Go", after)] == [entry.id]
    events = service.history(user, old.id)
    assert [e.operation for e in events] == [Operation.ADD, Operation.SUPERSEDE]
    assert "1.23" in events[1].text_before and "1.24" in events[1].text_after
    assert events[1].source.thread_id == "thread-1"
    assert events[1].source.message_ids == ["h1"] and events[1].source.actor == "worker"
    label = "supersede:model change=number" if proposal == "update" else "supersede tier=update"
    assert events[1].source.decision.startswith(label)


def test_an_enrichment_named_by_the_model_updates_in_place(service, user):
    old = service.add(user, "Production runs Go 1.23")
    more = {"memory_id": old.id, "memory": "Production runs Go 1.23 on Kubernetes"}
    worker, _ = worker_for(service, calls(tool_call("memory_update", more)))
    report = worker.process(user, "t", [HumanMessage("It is on Kubernetes", id="h1")])
    assert report.updated == 1 and report.superseded == 0
    (entry,) = service.read(user, include_superseded=True)
    assert entry.id == old.id and entry.text.endswith("on Kubernetes")


def test_a_model_update_of_an_episode_never_supersedes_it(service, user):
    when = datetime(2026, 5, 1, tzinfo=timezone.utc)
    trip = service.add(user, "Flew to Lisbon for 3 days", kind=Kind.EPISODE, event_time=when)
    fix = {
        "memory_id": trip.id,
        "memory": "Flew to Lisbon for 4 days",
        "memory_kind": "episode",
        "event_time": "2026-05-01",
    }
    worker, _ = worker_for(service, calls(tool_call("memory_update", fix)))
    report = worker.process(user, "t", [HumanMessage("Actually it was 4 days", id="h1")])
    assert report.updated == 1 and report.superseded == 0
    (entry,) = service.read(user, include_superseded=True)
    assert entry.id == trip.id and "4 days" in entry.text


def test_paraphrased_add_is_skipped(service, user):
    service.add(user, "Enjoys drinking green tea in the morning")
    worker, _ = worker_for(
        service,
        calls(tool_call("memory_add", {"memory": "Enjoys drinking green tea in the morning."})),
    )
    report = worker.process(user, "t", [HumanMessage("I love my morning green tea", id="1")])
    assert report.duplicates == 1 and report.added == 0 and service.count(user) == 1


def test_existing_memories_with_ids_reach_the_model(service, user):
    old = service.add(user, "Production runs Go 1.23")
    worker, model = worker_for(service, calls(tool_call("nothing_to_remember")))
    worker.process(user, "t", [HumanMessage("Production runs Go 1.24 now", id="1")])
    assert f'[{old.id}] "Production runs Go 1.23"' in model.calls[0][0].content


def test_update_of_missing_id_becomes_add_and_missing_delete_is_ignored(service, user):
    worker, _ = worker_for(
        service,
        calls(
            tool_call("memory_update", {"memory_id": "nope", "memory": "Lives in Oslo"}),
            tool_call("memory_delete", {"memory_id": "also-nope"}),
        ),
    )
    report = worker.process(user, "t", [HumanMessage("I live in Oslo", id="1")])
    assert report.status == JobStatus.COMPLETED
    assert [o.result for o in report.outcomes] == ["added", "missing"]
    assert [e.text for e in service.read(user)] == ["Lives in Oslo"]


def test_update_into_an_existing_text_deletes_the_redundant_source(service, user):
    tea = service.add(user, "Likes tea")
    coffee = service.add(user, "Likes coffee")
    worker, _ = worker_for(
        service, calls(tool_call("memory_update", {"memory_id": tea.id, "memory": "Likes coffee"}))
    )
    report = worker.process(user, "t", [HumanMessage("I switched from tea to coffee", id="1")])
    assert [o.result for o in report.outcomes] == ["duplicate"]
    assert [e.id for e in service.read(user)] == [coffee.id]
    assert service.history(user, tea.id)[-1].operation == Operation.DELETE


def test_failed_op_is_counted_and_the_rest_continue(service, user):
    worker, _ = worker_for(
        service,
        calls(
            tool_call("memory_add", {"memory": "x" * 9000}),
            tool_call("memory_add", {"memory": "Lives in Oslo"}),
        ),
    )
    report = worker.process(user, "t", [HumanMessage("I live in Oslo", id="1")])
    assert report.status == JobStatus.COMPLETED
    assert [o.result for o in report.outcomes] == ["failed", "added"]
    assert worker.stats().memories_failed == 1 and worker.stats().memories_added == 1


def test_disabled_clear_is_not_executed(service, user):
    service.add(user, "Likes tea")
    worker, _ = worker_for(service, calls(tool_call("memory_clear", {})))
    worker.process(user, "t", [HumanMessage("forget everything", id="1")])
    assert service.count(user) == 1


def test_clear_when_enabled(service, user):
    service.add(user, "Likes tea")
    worker, _ = worker_for(
        service, calls(tool_call("memory_clear", {})), actions=["add", "update", "delete", "clear"]
    )
    report = worker.process(user, "t", [HumanMessage("forget everything", id="1")])
    assert report.deleted == 1 and service.count(user) == 0


# -- cursor on every failure path ---------------------------------------------------


def cursor_after_failure(inner, user, extractor, breaks, **kw):
    flaky = FlakyService(inner)
    for name, error in breaks.items():
        flaky.fail[name] = error
    worker = AutoMemoryWorker(flaky, extractor, **kw)
    report = worker.process(user, "t", [HumanMessage("I live in Oslo", id="1")])
    return report, inner.get_cursor(user, "t"), worker


def test_search_failure_falls_back_to_recent_memories(service, user):
    service.add(user, "Likes tea")
    model = ScriptedChatModel(replies=[calls(tool_call("nothing_to_remember"))])
    report, cursor, _ = cursor_after_failure(
        service, user, LLMExtractor(model), {"search": BackendError("down")}
    )
    assert report.status == JobStatus.COMPLETED and cursor is not None
    assert "Likes tea" in model.calls[0][0].content


class NeedsExisting:
    """An instant extractor that reads the existing memories, as LLMExtractor does."""

    def extract(self, request):
        return [MemoryOp.add(m.content) for m in request.messages]


def test_existing_load_failure_keeps_the_cursor(service, user):
    breaks = {"search": BackendError("down"), "read": BackendError("down too")}
    report, cursor, worker = cursor_after_failure(service, user, NeedsExisting(), breaks)
    assert report.status == JobStatus.FAILED and "fallback read failed" in report.error
    assert cursor is None and service.count(user) == 0 and worker.stats().jobs_failed == 1


def test_verbatim_extractor_skips_the_existing_memory_search(service, user):
    breaks = {"search": BackendError("down"), "read": BackendError("down too")}
    report, cursor, _ = cursor_after_failure(service, user, VerbatimExtractor(), breaks)
    assert report.status == JobStatus.COMPLETED and cursor is not None


def test_cursor_read_failure_fails_the_job(service, user):
    report, cursor, _ = cursor_after_failure(
        service, user, VerbatimExtractor(), {"get_cursor": BackendError("x")}
    )
    assert report.status == JobStatus.FAILED and cursor is None and service.count(user) == 0


def test_extractor_error_keeps_the_cursor_and_retry_succeeds(service, user):
    def boom(messages):
        raise RuntimeError("rate limited")

    model = ScriptedChatModel(
        replies=[boom, calls(tool_call("memory_add", {"memory": "Lives in Oslo"}))]
    )
    worker = AutoMemoryWorker(service, LLMExtractor(model))
    msgs = [HumanMessage("I live in Oslo", id="1")]
    first = worker.process(user, "t", msgs)
    assert first.status == JobStatus.FAILED and "rate limited" in first.error
    assert service.get_cursor(user, "t") is None
    second = worker.process(user, "t", msgs)
    assert second.status == JobStatus.COMPLETED and second.messages == 1
    assert service.get_cursor(user, "t").last_message_id == "1"


def test_timeout_keeps_the_cursor(service, user):
    class Slow(VerbatimExtractor):
        def extract(self, request):
            time.sleep(0.5)
            return super().extract(request)

    worker = AutoMemoryWorker(service, Slow(), job_timeout=0.1)
    report = worker.process(user, "t", [HumanMessage("I live in Oslo", id="1")])
    assert report.status == JobStatus.FAILED and report.timed_out
    assert service.get_cursor(user, "t") is None
    time.sleep(0.6)
    assert service.count(user) == 0  # the late result was discarded
    assert worker.stats().jobs_timed_out == 1


def test_storage_failure_during_execution_keeps_the_cursor(service, user):
    flaky = FlakyService(service)
    flaky.fail["add"] = BackendError("disk full")
    worker = AutoMemoryWorker(flaky, VerbatimExtractor())
    report = worker.process(user, "t", [HumanMessage("I live in Oslo", id="1")])
    assert report.status == JobStatus.FAILED and report.failed_ops == 1
    assert service.get_cursor(user, "t") is None


def test_crash_between_operations_then_retry_leaves_no_duplicates(service, user):
    old = service.add(user, "Production runs Go 1.23")
    proposal = calls(
        tool_call("memory_add", {"memory": "Deploys every Friday"}),
        tool_call("memory_update", {"memory_id": old.id, "memory": "Production runs Go 1.24"}),
        tool_call("memory_add", {"memory": "Uses PostgreSQL 16 for billing"}),
        tool_call("memory_add", {"memory": "Production runs Go 1.24"}),
    )
    flaky = FlakyService(service)
    flaky.crash_on_write = 3
    model = ScriptedChatModel(replies=[proposal, proposal])
    msgs = [
        HumanMessage("We moved prod to Go 1.24, deploy Fridays, billing is on Postgres 16", id="1")
    ]
    with pytest.raises(Crash):
        AutoMemoryWorker(flaky, LLMExtractor(model)).process(user, "t", msgs)
    assert service.get_cursor(user, "t") is None
    report = AutoMemoryWorker(flaky, LLMExtractor(model)).process(user, "t", msgs)
    assert report.status == JobStatus.COMPLETED
    texts = sorted(e.text for e in service.read(user))
    assert texts == [
        "Deploys every Friday",
        "Production runs Go 1.24",
        "Uses PostgreSQL 16 for billing",
    ]


def test_verbatim_turns_become_episodes_deduplicated_only_when_identical(service, user):
    worker = AutoMemoryWorker(service, VerbatimExtractor())
    stamp = {"timestamp": "2023-05-08T13:56:00Z"}
    msgs = [
        HumanMessage("I went hiking", id="1", name="Caroline", additional_kwargs=stamp),
        AIMessage("Nice!", id="2"),
        HumanMessage("I went hiking again", id="3", name="Caroline", additional_kwargs=stamp),
    ]
    report = worker.process(user, "t", msgs)
    assert report.added == 2
    entries = service.read(user)
    assert {e.memory.kind.value for e in entries} == {"episode"}
    assert all(e.memory.participants == ["Caroline"] for e in entries)
    assert all(e.memory.event_time.isoformat() == "2023-05-08T13:56:00+00:00" for e in entries)
    # the same turns again in another thread: identical, so no new records
    again = worker.process(user, "t2", msgs)
    assert again.added == 0 and again.duplicates == 2 and service.count(user) == 2


def test_in_memory_reference_is_the_default_backend_fixture():
    assert isinstance(InMemoryMemoryService(), InMemoryMemoryService)


def test_a_supersede_onto_content_already_held_deletes_nothing(service, user):
    old = service.add(user, "Production runs Go 1.23")
    held = service.add(user, "Production runs Go 1.24")
    bump = {"memory_id": old.id, "memory": "Production runs Go 1.24"}
    worker, _ = worker_for(service, calls(tool_call("memory_update", bump)))
    report = worker.process(user, "t", [HumanMessage("We run Go 1.24 now", id="h1")])
    assert report.duplicates == 1 and report.failed_ops == 0
    assert {e.id for e in service.read(user)} == {old.id, held.id}  # both kept as they were
