from __future__ import annotations

import asyncio
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


NOTHING = tool_call("nothing_to_remember")


def reply(*calls, invalid=()):
    return AIMessage("", tool_calls=list(calls), invalid_tool_calls=list(invalid))


def test_tools_offered_follow_actions_and_policy():
    model = ScriptedChatModel(default=reply(NOTHING))
    extractor = LLMExtractor(model)
    extractor.extract(request())
    extractor.extract(request(actions=frozenset(Action)))
    extractor.extract(request(policy="append_only"))
    assert model.bound_tools[1:] == [  # [0]: the constructor's check that bind_tools works
        ["memory_add", "memory_update", "memory_delete", "nothing_to_remember"],
        ["memory_add", "memory_update", "memory_delete", "memory_clear", "nothing_to_remember"],
        ["memory_add", "nothing_to_remember"],
    ]


def test_system_prompt_carries_date_existing_ids_and_policy(service):
    from langmem_trpc import InMemoryMemoryService

    svc = InMemoryMemoryService()
    entry = svc.add(USER, "Production runs Go 1.23", topics=["go"])
    model = ScriptedChatModel(default=reply(NOTHING))
    LLMExtractor(model, reference_date=date(2024, 5, 20)).extract(
        request(existing=[entry], policy="preserve_history")
    )
    system = model.calls[0][0]
    assert isinstance(system, SystemMessage)
    assert "2024-05-20" in system.content
    assert f'[{entry.id}] "Production runs Go 1.23" (kind=fact; topics=go)' in system.content
    assert "<update_policy>" in system.content and "memory_update" in system.content
    assert "explicitly asks" in system.content


def test_reference_date_defaults_to_latest_message_time():
    model = ScriptedChatModel(default=reply(NOTHING))
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
    model = ScriptedChatModel(default=reply(NOTHING))
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


# -- a reply must be an extraction (#12.3) ------------------------------------------------


def test_a_reply_in_prose_is_a_failed_extraction_with_a_warning(caplog):
    model = ScriptedChatModel(replies=["Sure! The user moved to Oslo."])
    with caplog.at_level(logging.WARNING), pytest.raises(ExtractionError, match="no tool call"):
        LLMExtractor(model).extract(request())
    assert any(
        r.levelno == logging.WARNING and "failed extraction" in r.getMessage()
        for r in caplog.records
    )


def test_a_reply_whose_calls_are_all_unusable_is_a_failed_extraction():
    model = ScriptedChatModel(replies=[reply(tool_call("memory_frobnicate", {"x": 1}))])
    with pytest.raises(ExtractionError, match="unusable"):
        LLMExtractor(model).extract(request())


def test_nothing_to_remember_is_an_empty_successful_extraction():
    model = ScriptedChatModel(
        replies=[reply(tool_call("nothing_to_remember", {"reason": "chit-chat"}))]
    )
    assert LLMExtractor(model).extract(request()) == []
    system = model.calls[0][0].content
    assert "nothing_to_remember" in system


def test_binds_with_a_required_tool_choice():
    model = ScriptedChatModel(default=reply(NOTHING))
    extractor = LLMExtractor(model)
    extractor.extract(request())
    assert model.bound_options == [{}, {"tool_choice": "any"}]  # the constructor's check, a job


def test_a_model_that_rejects_tool_choice_is_bound_without_it():
    model = ScriptedChatModel(default=reply(NOTHING), accepts_tool_choice=False)
    extractor = LLMExtractor(model)
    assert extractor.extract(request()) == []
    assert extractor.extract(request()) == []
    assert model.bound_options == [{}, {}, {}]  # the constructor's check, two jobs
    assert extractor.tool_choice is None
    plain = ScriptedChatModel(default=reply(NOTHING))
    LLMExtractor(plain, tool_choice=None).extract(request())
    assert plain.bound_options == [{}, {}]


def test_a_server_that_refuses_tool_choice_is_retried_without_it():
    model = ScriptedChatModel(replies=[reply(NOTHING), reply(NOTHING)], serves_tool_choice=False)
    extractor = LLMExtractor(model)
    assert extractor.extract(request()) == [] and extractor.tool_choice is None
    assert model.bound_options == [{}, {"tool_choice": "any"}, {}]
    assert len(model.calls) == 1  # the refused call never reached the script
    broken = ScriptedChatModel(replies=[lambda m: (_ for _ in ()).throw(RuntimeError("HTTP 500"))])
    with pytest.raises(ExtractionError, match="HTTP 500"):
        LLMExtractor(broken).extract(request())


def _extract(extractor: LLMExtractor, mode: str) -> list[MemoryOp]:
    if mode == "async":
        return asyncio.run(extractor.aextract(request()))
    return extractor.extract(request())


def _raise(exc: Exception):
    def call(messages):
        raise exc

    return call


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_tool_choice_retry_is_the_same_for_extract_and_aextract(mode):
    refused = ScriptedChatModel(replies=[reply(NOTHING)], serves_tool_choice=False)
    extractor = LLMExtractor(refused)
    assert _extract(extractor, mode) == [] and extractor.tool_choice is None
    assert refused.bound_options == [{}, {"tool_choice": "any"}, {}]
    # the retry fails too: wrapped, even when it raised an ExtractionError itself
    again = ScriptedChatModel(replies=[_raise(ExtractionError("bad"))], serves_tool_choice=False)
    with pytest.raises(ExtractionError, match=r"^model call failed: ExtractionError: bad$"):
        _extract(LLMExtractor(again), mode)
    # a first failure that is an ExtractionError is raised as it is
    first = ScriptedChatModel(replies=[_raise(ExtractionError("tool_choice gone"))])
    with pytest.raises(ExtractionError, match=r"^tool_choice gone$"):
        _extract(LLMExtractor(first), mode)
    # any other first failure is wrapped and not retried
    other = ScriptedChatModel(replies=[_raise(RuntimeError("down")), reply(NOTHING)])
    with pytest.raises(ExtractionError, match=r"^model call failed: RuntimeError: down$"):
        _extract(LLMExtractor(other), mode)
    assert other.remaining == 1


def test_worker_keeps_the_cursor_when_the_model_answers_in_prose():
    from langmem_trpc import AutoMemoryWorker, InMemoryMemoryService
    from langmem_trpc.extraction import JobStatus

    service = InMemoryMemoryService()
    model = ScriptedChatModel(
        replies=[
            "I will remember that you live in Oslo.",
            reply(tool_call("memory_add", {"memory": "Lives in Oslo"})),
        ]
    )
    worker = AutoMemoryWorker(service, LLMExtractor(model))
    msgs = [HumanMessage("I live in Oslo", id="1")]
    first = worker.process(USER, "t", msgs)
    assert first.status == JobStatus.FAILED and "no tool call" in (first.error or "")
    assert service.get_cursor(USER, "t") is None and service.count(USER) == 0
    second = worker.process(USER, "t", msgs)
    assert second.status == JobStatus.COMPLETED and second.added == 1


# -- one bad operation skips only itself (#12.5) ----------------------------------------


def test_an_event_time_that_overflows_the_calendar_skips_only_that_call(caplog):
    model = ScriptedChatModel(
        replies=[
            reply(
                tool_call("memory_add", {"memory": "Lives in Oslo"}),
                tool_call(
                    "memory_add",
                    {
                        "memory": "Party at the end of time",
                        "memory_kind": "episode",
                        "event_time": "9999-12-31T23:00:00-05:00",
                    },
                ),
                tool_call("memory_add", {"memory": "Keeps bees"}),
            )
        ]
    )
    with caplog.at_level(logging.WARNING):
        ops = LLMExtractor(model).extract(request())
    texts = [op.text for op in ops]
    assert "Lives in Oslo" in texts and "Keeps bees" in texts
    bad = [op for op in ops if op.text == "Party at the end of time"]
    assert all(op.event_time is None or op.event_time.year == 9999 for op in bad)
    assert "Lives in Oslo" == texts[0]


def test_the_valid_adds_of_a_reply_with_a_poisoned_call_are_stored():
    from langmem_trpc import AutoMemoryWorker, InMemoryMemoryService
    from langmem_trpc.extraction import JobStatus

    service = InMemoryMemoryService()
    model = ScriptedChatModel(
        replies=[
            reply(
                tool_call("memory_add", {"memory": "Lives in Oslo"}),
                tool_call(
                    "memory_add",
                    {
                        "memory": "Edge",
                        "memory_kind": "episode",
                        "event_time": "0001-01-01T00:30+01:00",
                    },
                ),
                tool_call("memory_add", {"memory": "Keeps bees"}),
            )
        ]
    )
    report = AutoMemoryWorker(service, LLMExtractor(model)).process(
        USER, "t", [HumanMessage("I live in Oslo and keep bees", id="1")]
    )
    assert report.status == JobStatus.COMPLETED
    stored = {e.text for e in service.read(USER)}
    assert {"Lives in Oslo", "Keeps bees"} <= stored


def test_a_model_that_cannot_bind_tools_is_refused_at_construction():
    """LangChain's fakes inherit a `bind_tools` that raises an empty NotImplementedError;
    every job then failed with `NotImplementedError: ` (issue 30, item 2)."""
    from langchain_core.language_models import GenericFakeChatModel

    from langmem_trpc import ConfigurationError

    with pytest.raises(ConfigurationError) as caught:
        LLMExtractor(GenericFakeChatModel(messages=iter([])))
    text = str(caught.value)
    assert "GenericFakeChatModel.bind_tools raised NotImplementedError" in text
    assert "langmem_trpc.testing.ScriptedChatModel" in text
    with pytest.raises(ConfigurationError, match="bind_tools"):
        LLMExtractor(object())  # type: ignore[arg-type]


def test_an_exception_without_a_message_still_says_what_it_is():
    from langmem_trpc.errors import error_text

    broken = ScriptedChatModel(replies=[_raise(NotImplementedError())])
    with pytest.raises(ExtractionError) as caught:
        LLMExtractor(broken).extract(request())
    assert str(caught.value) == (
        "model call failed: NotImplementedError (raised without a message: something called "
        "is not implemented, e.g. bind_tools on a chat model that cannot call tools)"
    )
    assert error_text(RuntimeError()) == "RuntimeError (raised without a message)"
    assert error_text(ValueError("bad")) == "ValueError: bad"
