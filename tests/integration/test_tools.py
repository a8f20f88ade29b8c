"""Memory tools: schemas, results, identity, and safe errors under create_agent."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.prebuilt import ToolRuntime

from langmem_trpc import ConfigurationError, create_memory_tools
from langmem_trpc.testing import ScriptedChatModel, tool_call

from .conftest import ALICE, BOB, SECRET, BrokenService, CountingService

ALL = (
    "memory_search",
    "memory_load",
    "memory_add",
    "memory_update",
    "memory_delete",
    "memory_clear",
)


def _runtime(context: Any = None, configurable: dict[str, Any] | None = None) -> ToolRuntime[Any]:
    config = {
        "configurable": configurable
        if configurable is not None
        else {"app_name": "demo", "user_id": "alice"}
    }
    return ToolRuntime(
        state={},
        context=context,
        config=config,
        stream_writer=lambda _: None,
        tool_call_id="1",
        store=None,
    )


def _call(tool: Any, args: dict[str, Any], mode: str = "sync", runtime: Any = None) -> ToolMessage:
    call = {
        "name": tool.name,
        "args": {**args, "runtime": runtime or _runtime()},
        "id": "c1",
        "type": "tool_call",
    }
    if mode == "async":
        return asyncio.run(tool.ainvoke(call))
    return tool.invoke(call)


def _tools(service: Any, include: tuple[str, ...] = ALL) -> dict[str, Any]:
    return {t.name: t for t in create_memory_tools(service, include)}


def test_default_tools_and_schemas(service: CountingService):
    tools = create_memory_tools(service)
    assert [t.name for t in tools] == ["memory_search", "memory_load"]
    search = tools[0].tool_call_schema.model_json_schema()
    assert list(search["properties"]) == [
        "query",
        "kind",
        "time_after",
        "time_before",
        "order_by_event_time",
        "as_of",
        "limit",
    ]
    assert search["required"] == ["query"]
    assert "runtime" not in search["properties"]
    description = tools[0].description
    assert "Split a multi-part question" in description and "participants" in description


def test_clear_only_when_named_and_unknown_names_rejected(service: CountingService):
    assert "memory_clear" not in [t.name for t in create_memory_tools(service, ALL[:5])]
    with pytest.raises(ConfigurationError):
        create_memory_tools(service, ("memory_search", "memory_nuke"))
    with pytest.raises(ConfigurationError):
        create_memory_tools(service, ("memory_search", "memory_search"))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_search_returns_compact_json_and_artifact(mode: str, service: CountingService):
    service.add(
        ALICE,
        "Hiked Mont Blanc with Bob",
        kind="episode",
        event_time="2024-07-02",
        participants=["Bob"],
    )
    service.add(ALICE, "Prefers tea over coffee")
    service.add(BOB, "Bob hiked too")
    message = _call(_tools(service)["memory_search"], {"query": "hiking Mont Blanc"}, mode)
    assert message.status == "success"
    payload = json.loads(message.content)
    assert payload["query"] == "hiking Mont Blanc"
    top = payload["results"][0]
    assert top["memory"] == "Hiked Mont Blanc with Bob"
    assert top["participants"] == ["Bob"] and top["event_time"].startswith("2024-07-02")
    assert all("Bob hiked too" != r["memory"] for r in payload["results"])
    assert ", " not in message.content  # compact separators
    assert message.artifact[0]["id"] == top["id"]


def test_search_time_filters_and_empty_query(service: CountingService):
    service.add(ALICE, "Trip to Rome", kind="episode", event_time="2023-05-08")
    service.add(ALICE, "Trip to Oslo", kind="episode", event_time="2024-02-01")
    search = _tools(service)["memory_search"]
    payload = json.loads(_call(search, {"query": "trip", "time_before": "2023"}).content)
    assert [r["memory"] for r in payload["results"]] == ["Trip to Rome"]
    payload = json.loads(_call(search, {"query": "trip", "time_after": "Jan 2024"}).content)
    assert [r["memory"] for r in payload["results"]] == ["Trip to Oslo"]
    assert json.loads(_call(search, {"query": "  "}).content) == {
        "query": "",
        "results": [],
        "count": 0,
    }
    bad = _call(search, {"query": "trip", "time_after": "someday"})
    assert bad.status == "error" and "time_after" in bad.content


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_search_as_of_finds_the_past_with_its_validity_and_load_is_current(
    mode: str, service: CountingService
):
    old = service.add(ALICE, "Production runs Go 1.23", valid_from="2026-01-05")
    new = service.update(
        ALICE, old.id, "Production runs Go 1.24", supersede=True, valid_from="2026-07-20"
    )
    tools = _tools(service)
    now = json.loads(_call(tools["memory_search"], {"query": "production Go"}, mode).content)
    assert [r["id"] for r in now["results"]] == [new.id] and "valid_from" not in now["results"][0]
    july = {"query": "production Go", "as_of": "2026-07-01"}
    payload = json.loads(_call(tools["memory_search"], july, mode).content)
    assert payload["as_of"] == "2026-07-01T00:00:00+00:00"
    (past,) = payload["results"]
    assert past["id"] == old.id and past["memory"] == "Production runs Go 1.23"
    assert past["valid_from"] == "2026-01-05T00:00:00+00:00"
    assert past["valid_to"] == "2026-07-20T00:00:00+00:00" and past["superseded_by"] == new.id
    loaded = json.loads(_call(tools["memory_load"], {}, mode).content)
    assert [r["id"] for r in loaded["results"]] == [new.id]  # current only
    assert "as_of" in tools["memory_search"].description


def test_a_bad_as_of_is_a_clear_tool_error(service: CountingService):
    search = _tools(service)["memory_search"]
    bad = _call(search, {"query": "Go", "as_of": "last summer-ish"})
    assert bad.status == "error"
    assert bad.content.startswith("memory_search: invalid as_of: cannot parse 'last summer-ish'")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_write_tools_round_trip(mode: str, service: CountingService):
    tools = _tools(service)
    added = json.loads(
        _call(tools["memory_add"], {"memory": "Uses Go 1.23", "topics": ["go"]}, mode).content
    )
    assert added["message"] == "Memory added successfully"
    mid = added["memory_id"]
    updated = json.loads(
        _call(tools["memory_update"], {"memory_id": mid, "memory": "Uses Go 1.24"}, mode).content
    )
    assert updated["memory_id"] == mid and service.get(ALICE, mid).text == "Uses Go 1.24"
    assert service.history(ALICE, mid)[-1].source.actor == "tool"
    assert added["id"] == added["memory_id"] and updated["id"] == mid  # the key search uses
    refused = _call(tools["memory_load"], {"limit": 0}, mode)  # rejected as search rejects it
    assert refused.status == "error" and "invalid arguments (limit: " in refused.content
    loaded = json.loads(_call(tools["memory_load"], {"limit": 10}, mode).content)
    assert loaded["limit"] == 10 and loaded["count"] == 1
    deleted = json.loads(_call(tools["memory_delete"], {"memory_id": mid}, mode).content)
    assert deleted == {"message": "Memory deleted successfully", "id": mid, "memory_id": mid}
    missing = _call(tools["memory_delete"], {"memory_id": mid}, mode)
    assert missing.status == "error" and "not found" in missing.content
    service.add(ALICE, "a")
    service.add(ALICE, "b")
    cleared = json.loads(_call(tools["memory_clear"], {}, mode).content)
    assert cleared["count"] == 2 and service.count(ALICE) == 0


def test_bad_arguments_are_tool_errors_naming_the_field(service: CountingService):
    tools = _tools(service)
    empty = _call(tools["memory_add"], {"memory": "   "})
    assert empty.status == "error" and "memory" in empty.content
    wrong = _call(tools["memory_update"], {"memory_id": "nope", "memory": "x"})
    assert wrong.status == "error" and "not found" in wrong.content
    schema = _call(tools["memory_search"], {"query": "x", "kind": "preference"})
    assert schema.status == "error" and "kind" in schema.content


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_missing_identity_is_a_tool_error(mode: str, service: CountingService):
    message = _call(
        _tools(service)["memory_search"], {"query": "x"}, mode, _runtime(configurable={})
    )
    assert message.status == "error" and "no user identity" in message.content


def test_identity_from_context(service: CountingService):
    service.add(BOB, "Bob likes jazz")
    runtime = _runtime(context={"app_name": "demo", "user_id": "bob"}, configurable={})
    payload = json.loads(
        _call(_tools(service)["memory_search"], {"query": "jazz"}, runtime=runtime).content
    )
    assert payload["results"][0]["memory"] == "Bob likes jazz"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_backend_failure_is_a_safe_error(mode: str):
    for name, args in [
        ("memory_search", {"query": "x"}),
        ("memory_load", {}),
        ("memory_add", {"memory": "x"}),
    ]:
        message = _call(_tools(BrokenService())[name], args, mode)
        assert message.status == "error"
        assert "unavailable" in message.content
        assert "hunter2" not in message.content and "postgresql" not in message.content
        assert "SELECT" not in message.content


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_backend_failure_under_create_agent(mode: str):
    model = ScriptedChatModel(
        replies=[
            AIMessage("", tool_calls=[tool_call("memory_search", {"query": "go"})]),
            "I could not reach memory.",
        ]
    )
    agent = create_agent(model, tools=create_memory_tools(BrokenService()))
    inputs = {"messages": [HumanMessage("what Go version?")]}
    config = {"configurable": {"app_name": "demo", "user_id": "alice"}}
    out = (
        await agent.ainvoke(inputs, config)
        if mode == "async"
        else await asyncio.to_thread(agent.invoke, inputs, config)
    )
    tool_message = next(m for m in out["messages"] if isinstance(m, ToolMessage))
    assert tool_message.status == "error" and SECRET not in tool_message.content
    assert out["messages"][-1].content == "I could not reach memory."


# -- no copyable example queries; repeated calls refused (#12.10) ---------------------------

_FORMAT_HINT = re.compile(r"^(\d{4}(-\d{2}){0,2}|[A-Z][a-z]+ \d{4}|fact|episode)$")


def _texts(tool: Any) -> list[str]:
    schema = tool.tool_call_schema.model_json_schema()
    return [tool.description] + [
        p.get("description", "") for p in schema.get("properties", {}).values()
    ]


def test_descriptions_hold_format_hints_but_no_copyable_example_query(service: CountingService):
    for tool in create_memory_tools(service, ALL):
        for text in _texts(tool):
            assert "Alice" not in text and "hiking" not in text, (tool.name, text)
            for quoted in re.findall(r"(?<!\w)'([^']+)'(?!\w)", text):
                assert _FORMAT_HINT.match(quoted), (tool.name, quoted)


def _repeat_agent(service: Any, *queries: str) -> tuple[Any, ScriptedChatModel]:
    replies: list[Any] = [
        AIMessage("", tool_calls=[tool_call("memory_search", {"query": q})]) for q in queries
    ]
    model = ScriptedChatModel(replies=[*replies, "done"])
    return create_agent(model, tools=create_memory_tools(service)), model


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_repeated_identical_call_in_one_run_is_refused(mode: str, service: CountingService):
    service.add(ALICE, "Production runs Go 1.24")
    agent, _ = _repeat_agent(service, "Go version", "  go   VERSION ", "Go release")
    inputs = {"messages": [HumanMessage("what Go version?")]}
    config = {"configurable": {"app_name": "demo", "user_id": "alice"}}
    out = (
        await agent.ainvoke(inputs, config)
        if mode == "async"
        else await asyncio.to_thread(agent.invoke, inputs, config)
    )
    results = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert "Go 1.24" in results[0].content
    assert "already made in this run" in results[1].content and "Go 1.24" not in results[1].content
    assert "already made" not in results[2].content
    assert service.searches == 2


def test_a_new_run_or_a_failed_call_may_repeat(service: CountingService):
    from langgraph.checkpoint.memory import InMemorySaver

    model = ScriptedChatModel(
        replies=[
            AIMessage("", tool_calls=[tool_call("memory_search", {"query": "Go version"})]),
            "first",
            AIMessage("", tool_calls=[tool_call("memory_search", {"query": "Go version"})]),
            "second",
        ]
    )
    agent = create_agent(model, tools=create_memory_tools(service), checkpointer=InMemorySaver())
    config = {"configurable": {"app_name": "demo", "user_id": "alice", "thread_id": "t"}}
    agent.invoke({"messages": [HumanMessage("what Go version?")]}, config)
    out = agent.invoke({"messages": [HumanMessage("and now?")]}, config)
    results = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert len(results) == 2 and all("already made" not in m.content for m in results)
    earlier = AIMessage("", tool_calls=[tool_call("memory_search", {"query": "go"}, "c0")])
    failed = ToolMessage("memory_search failed", tool_call_id="c0", status="error")
    current = AIMessage("", tool_calls=[tool_call("memory_search", {"query": "go"}, "c1")])
    runtime = _runtime()
    runtime.state = {"messages": [HumanMessage("q"), earlier, failed, current]}
    runtime.tool_call_id = "c1"
    retry = _call(_tools(service)["memory_search"], {"query": "go"}, runtime=runtime)
    assert "already made" not in retry.content and retry.status != "error"


# -- bad input is not an outage (#13.5) ---------------------------------------------------

BAD_INPUT = [
    (
        "memory_search",
        {"query": "go", "time_after": "9999-12-31T23:00:00-05:00"},
        "invalid time range",
    ),
    (
        "memory_search",
        {"query": "go", "time_before": "0001-01-01T00:30+01:00"},
        "invalid time range",
    ),
    (
        "memory_search",
        {"query": "go", "time_after": "2024-05-01", "time_before": "2023"},
        "invalid time range",
    ),
    ("memory_search", {"query": "go \ud800"}, "invalid query: is not valid Unicode"),
    ("memory_add", {"memory": "Likes \udfff tea"}, "invalid memory: is not valid Unicode"),
    ("memory_add", {"memory": "ok", "participants": ["\ud800"]}, "invalid participants"),
    (
        "memory_add",
        {"memory": "Party", "memory_kind": "episode", "event_time": "9999-12-31T23:00-05:00"},
        "invalid event_time",
    ),
]


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_backend(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    from langmem_trpc import InMemoryMemoryService
    from langmem_trpc.testing import HashingEmbeddings

    svc: Any
    if request.param == "memory":
        svc = InMemoryMemoryService(embeddings=HashingEmbeddings())
    elif request.param == "sqlite":
        from langmem_trpc.backends.sqlite import SQLiteMemoryService

        svc = SQLiteMemoryService(str(tmp_path / "m.db"), embeddings=HashingEmbeddings())
    else:
        from langmem_trpc.backends.postgres import PostgresMemoryService

        svc = PostgresMemoryService(request.getfixturevalue("pg_url"), HashingEmbeddings())
        svc.setup()
    yield svc
    svc.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_bad_input_reads_as_bad_input_never_as_an_outage(mode: str, any_backend: Any):
    tools = _tools(any_backend)
    for name, args, expected in BAD_INPUT:
        message = _call(tools[name], args, mode)
        assert message.status == "error", (name, args)
        assert expected in message.content, (name, args, message.content)
        assert "unavailable" not in message.content
    assert any_backend.count(ALICE) == 0


def test_the_as_of_recipe_runs_as_written(capsys: pytest.CaptureFixture[str]):
    """docs/recipes.md, "Answer an as-of question": the agent answers from both versions."""
    from pathlib import Path

    from tests.test_docs import _code_block

    recipes = (Path(__file__).resolve().parents[2] / "docs" / "recipes.md").read_text()
    namespace: dict[str, Any] = {}
    exec(_code_block(recipes, "## Answer an as-of question", "python"), namespace)
    assert capsys.readouterr().out.strip() == (
        "On 1 July: Production runs Go 1.23; on 31 July: Production runs Go 1.24 "
        "(changed on 2026-07-20)."
    )
    old, new = namespace["old"], namespace["new"]
    assert old.superseded_by == new.id and new.valid_from.isoformat() == "2026-07-20T09:30:00+00:00"
