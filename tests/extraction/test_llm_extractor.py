from __future__ import annotations

import logging
from datetime import date, datetime, timezone

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from langmem_trpc import ExtractionError, Kind, LLMExtractor, UserKey
from langmem_trpc.extraction import Action, ExtractionRequest, MemoryOp
from langmem_trpc.testing import ScriptedChatModel, tool_call

USER = UserKey("app", "u")


def request(messages=None, **kw):
    return ExtractionRequest(
        USER, "t", messages or [HumanMessage("I moved to Oslo last year")], **kw
    )


def reply(*calls, invalid=()):
    return AIMessage("", tool_calls=list(calls), invalid_tool_calls=list(invalid))


def test_tools_offered_follow_actions_and_policy():
    model = ScriptedChatModel(default=reply())
    extractor = LLMExtractor(model)
    extractor.extract(request())
    extractor.extract(request(actions=frozenset(Action)))
    extractor.extract(request(policy="append_only"))
    assert model.bound_tools == [
        ["memory_add", "memory_update", "memory_delete"],
        ["memory_add", "memory_update", "memory_delete", "memory_clear"],
        ["memory_add"],
    ]


def test_system_prompt_carries_date_existing_ids_and_policy(service):
    from langmem_trpc import InMemoryMemoryService

    svc = InMemoryMemoryService()
    entry = svc.add(USER, "Production runs Go 1.23", topics=["go"])
    model = ScriptedChatModel(default=reply())
    LLMExtractor(model, reference_date=date(2024, 5, 20)).extract(
        request(existing=[entry], policy="preserve_history")
    )
    system = model.calls[0][0]
    assert isinstance(system, SystemMessage)
    assert "2024-05-20" in system.content
    assert f"[{entry.id}] Production runs Go 1.23" in system.content
    assert "<update_policy>" in system.content and "memory_update" in system.content
    assert "explicitly asks" in system.content


def test_reference_date_defaults_to_latest_message_time():
    model = ScriptedChatModel(default=reply())
    msg = HumanMessage(
        "We went hiking yesterday",
        name="Caroline",
        additional_kwargs={"timestamp": "2023-05-08T13:56:00Z"},
    )
    LLMExtractor(model).extract(request([msg]))
    system, labelled = model.calls[0][0], model.calls[0][1]
    assert "2023-05-08" in system.content
    assert labelled.content.startswith("[Caroline, 2023-05-08T13:56:00+00:00] We went hiking")


def test_closing_instruction_when_the_assistant_spoke_last():
    model = ScriptedChatModel(default=reply())
    LLMExtractor(model).extract(request([HumanMessage("hi"), AIMessage("hello")]))
    assert model.calls[0][-1].content == "Extract and manage memories from the conversation above."


def test_tool_calls_become_typed_operations():
    model = ScriptedChatModel(
        replies=[
            reply(
                tool_call(
                    "memory_add",
                    {
                        "memory": "Went hiking with Sam",
                        "topics": ["hiking"],
                        "memory_kind": "episode",
                        "event_time": "2024-05-18",
                        "participants": ["Sam"],
                        "location": "Mount Tam",
                    },
                ),
                tool_call("memory_update", {"memory_id": "m1", "memory": "Runs Go 1.24"}),
                tool_call("memory_delete", {"memory_id": "m2"}),
            )
        ]
    )
    ops = LLMExtractor(model).extract(request())
    assert ops[0] == MemoryOp.add(
        "Went hiking with Sam",
        topics=["hiking"],
        kind=Kind.EPISODE,
        event_time=datetime(2024, 5, 18, tzinfo=timezone.utc),
        participants=["Sam"],
        location="Mount Tam",
    )
    assert ops[1] == MemoryOp.update("m1", "Runs Go 1.24", kind=Kind.FACT)
    assert ops[2] == MemoryOp.delete("m2")


def test_malformed_calls_are_logged_and_skipped(caplog):
    model = ScriptedChatModel(
        replies=[
            reply(
                tool_call("memory_add", {"memory": 42}),
                tool_call("memory_add", {}),
                tool_call("memory_update", {"memory": "no id"}),
                tool_call("memory_delete", {"memory_id": ""}),
                tool_call("memory_frobnicate", {"memory": "x"}),
                tool_call("memory_clear", {}),  # not offered
                tool_call(
                    "memory_add",
                    {"memory": "Keeps bees", "topics": "bees", "event_time": "someday"},
                ),
                invalid=[
                    {
                        "name": "memory_add",
                        "args": "{bad json",
                        "id": "c9",
                        "error": "bad JSON",
                        "type": "invalid_tool_call",
                    }
                ],
            )
        ]
    )
    with caplog.at_level(logging.WARNING):
        ops = LLMExtractor(model).extract(request())
    assert ops == [MemoryOp.add("Keeps bees", kind=Kind.FACT)]
    assert caplog.text.count("skipped") >= 7


def test_model_failure_is_an_extraction_error():
    def boom(messages):
        raise RuntimeError("provider down")

    with pytest.raises(ExtractionError, match="provider down"):
        LLMExtractor(ScriptedChatModel(replies=[boom])).extract(request())


def test_no_messages_no_call():
    model = ScriptedChatModel()
    assert LLMExtractor(model).extract(ExtractionRequest(USER, "t", [])) == []
    assert model.calls == []
