"""Expiry from what was said (issue #26): the extractor's `valid_until` argument.

"I'm in Tokyo until Friday": the model resolves the date, the memory stops being
current then, and `as_of` still finds it (it is not deleted). A bad value is
dropped with a warning naming the call and the argument; the memory is kept.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone

from langchain_core.messages import AIMessage, HumanMessage

from langmem_trpc import AutoMemoryWorker, LLMExtractor, SearchOptions
from langmem_trpc.extraction import JobStatus
from langmem_trpc.extraction.ops import Action
from langmem_trpc.extraction.tool_calls import tool_schemas
from langmem_trpc.testing import ScriptedChatModel, tool_call

MONDAY = datetime(2026, 7, 20, 9, 0, tzinfo=timezone.utc)
SATURDAY = datetime(2026, 7, 25, tzinfo=timezone.utc)


def said(text: str, at: datetime = MONDAY, id: str = "h1") -> HumanMessage:
    return HumanMessage(text, id=id, additional_kwargs={"timestamp": at.isoformat()})


def run(service, user, *calls, messages=None):
    model = ScriptedChatModel(replies=[AIMessage("", tool_calls=list(calls))])
    worker = AutoMemoryWorker(service, LLMExtractor(model))
    report = worker.process(user, "t", messages or [said("I'm in Tokyo until Friday")])
    return report, model


def test_the_tools_and_the_prompt_offer_valid_until():
    for schema in tool_schemas({Action.ADD, Action.UPDATE}, "merge_similar")[:2]:
        described = schema["parameters"]["properties"]["valid_until"]["description"]
        assert "until Friday" in described and "ISO 8601" in described
    model = ScriptedChatModel(default=AIMessage("", tool_calls=[tool_call("nothing_to_remember")]))
    from langmem_trpc import UserKey
    from langmem_trpc.extraction import ExtractionRequest

    LLMExtractor(model).extract(ExtractionRequest(UserKey("a", "u"), "t", [said("hi")]))
    system = model.calls[0][0].content
    assert "set valid_until" in system and "this week only" in system


def test_until_friday_stops_being_current_on_saturday_and_as_of_still_finds_it(service, user):
    add = tool_call(
        "memory_add", {"memory": "Is in Tokyo", "topics": ["travel"], "valid_until": "2026-07-24"}
    )
    report, _ = run(service, user, add)
    assert report.status == JobStatus.COMPLETED and report.added == 1
    (entry,) = service.read(user, include_superseded=True)
    assert entry.valid_from == MONDAY and entry.valid_to == SATURDAY  # through Friday
    assert service.read(user) == []  # today (past July 2026) it is no longer current
    on_friday = SearchOptions(as_of="2026-07-24T23:00:00Z")
    assert [e.id for e in service.search(user, "Tokyo", on_friday)] == [entry.id]
    assert service.search(user, "Tokyo", SearchOptions(as_of="2026-07-25T00:00:00Z")) == []


def test_an_update_sets_valid_until_in_place_and_a_refused_one_is_dropped(service, user, caplog):
    old = service.add(user, "Works from the Berlin office", valid_from="2026-07-01")
    text = "Works from the Berlin office"
    update = {"memory_id": old.id, "memory": text, "valid_until": "2099-07"}
    first = [said("Until July 2099")]
    run(service, user, tool_call("memory_update", update), messages=first)
    (entry,) = service.read(user)
    assert entry.id == old.id and entry.valid_to == datetime(2099, 8, 1, tzinfo=timezone.utc)
    before = service.add(user, "Moves to the Oslo office", valid_from="2027-03-01")  # a plan
    lapsed = {
        "memory_id": before.id,
        "memory": "Moves to the Oslo office",
        "valid_until": "2026-12",
    }
    with caplog.at_level(logging.WARNING):  # after the message, before the plan's own start
        thread = [*first, said("Oslo until December", id="h2")]
        report, _ = run(service, user, tool_call("memory_update", lapsed), messages=thread)
    assert report.updated == 1 and report.failed_ops == 0
    assert "valid_until of 'Moves to the Oslo office' refused" in caplog.text
    assert service.get(user, before.id).valid_to is None


def test_a_bad_valid_until_is_reported_and_dropped_the_memory_kept(service, user, caplog):
    calls = [
        tool_call("memory_add", {"memory": "Is in Tokyo", "valid_until": "next Friday-ish"}),
        tool_call("memory_add", {"memory": "Is in Osaka", "valid_until": "2026-07-01"}),
        tool_call("memory_add", {"memory": "Is in Kyoto", "valid_until": "9999-12-31"}),
    ]
    with caplog.at_level(logging.WARNING):
        report, _ = run(service, user, *calls)
    assert report.added == 3 and report.failed_ops == 0
    assert all(e.valid_to is None for e in service.read(user))
    assert "memory_add.valid_until 'next Friday-ish' is not a date; ignored" in caplog.text
    assert "valid_until 2026-07-02T00:00:00+00:00 of 'Is in Osaka' is not after" in caplog.text
    assert "memory_add.valid_until '9999-12-31' is out of range" in caplog.text
