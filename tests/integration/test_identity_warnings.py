"""A run without identity gets no memory; that is warned once per component, not silent
(issue 30, item 7). So is a preload node whose block has no place in the graph's state."""

from __future__ import annotations

import logging

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph

from langmem_trpc import (
    MemoryCheckpointer,
    MemoryIngestMiddleware,
    MemoryPreloadMiddleware,
    UserKey,
    create_preload_node,
)
from langmem_trpc.integration.preload import preload_messages
from langmem_trpc.testing import ScriptedChatModel

from .conftest import RecordingWorker

ALICE = {"app_name": "support", "user_id": "alice"}


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def _graph(service, worker, *, with_context_key: bool = True, model=None):
    if with_context_key:

        class State(MessagesState):
            memory_context: str

    else:
        State = MessagesState  # type: ignore[misc]
    builder = StateGraph(State)
    builder.add_node("preload", create_preload_node(service, model, preload=10))
    builder.add_edge(START, "preload")
    return builder.compile(checkpointer=MemoryCheckpointer(InMemorySaver(), worker))


def test_a_stategraph_run_with_only_a_thread_id_warns_once_per_component(service, caplog):
    worker = RecordingWorker()
    graph = _graph(service, worker)
    with caplog.at_level(logging.WARNING):
        for thread in ("x", "y"):
            graph.invoke(
                {"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": thread}}
            )
    assert worker.jobs == []
    messages = warnings_of(caplog)
    assert len(messages) == 2, messages  # the node's preload, the checkpointer's hook
    hook = next(m for m in messages if m.startswith("MemoryCheckpointer"))
    node = next(m for m in messages if m.startswith("create_preload_node"))
    assert "no app_name and no user_id" in hook and "nothing is extracted" in hook
    assert "no memories are preloaded" in node
    for text in (hook, node):
        assert "context=" in text and "configurable" in text and "LangGraph Server" in text


def test_a_run_with_identity_warns_nothing(service, caplog):
    worker = RecordingWorker()
    graph = _graph(service, worker)
    with caplog.at_level(logging.WARNING):
        graph.invoke(
            {"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "x", **ALICE}}
        )
    assert warnings_of(caplog) == []
    assert [job[0] for job in worker.jobs] == [UserKey("support", "alice")]


def test_the_warning_names_what_is_missing(service, caplog):
    worker = RecordingWorker()
    graph = _graph(service, worker)
    with caplog.at_level(logging.WARNING):
        graph.invoke(
            {"messages": [HumanMessage("hi")]},
            {"configurable": {"thread_id": "x", "app_name": "support"}},
        )
    messages = warnings_of(caplog)
    assert messages and all("this run has no user_id," in m for m in messages), messages


def test_agent_middleware_without_identity_warns_once_each(service, caplog):
    worker = RecordingWorker()
    agent = create_agent(
        ScriptedChatModel(default="ok"),
        middleware=[MemoryPreloadMiddleware(service, preload=10), MemoryIngestMiddleware(worker)],
    )
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            agent.invoke({"messages": [HumanMessage("hi")]})
    assert worker.jobs == []
    messages = warnings_of(caplog)
    assert sorted(m.split(":")[0] for m in messages) == [
        "MemoryIngestMiddleware",
        "MemoryPreloadMiddleware",
    ], messages


def test_preload_messages_warns_once_for_all_its_calls(service, caplog, monkeypatch):
    from langmem_trpc.integration import preload
    from langmem_trpc.integration.identity import MissingIdentityWarning

    fresh = MissingIdentityWarning("preload_messages", "no memories are preloaded")
    monkeypatch.setattr(preload, "HELPERS_NO_IDENTITY", fresh)  # other tests may have warned
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            preload_messages(service, [HumanMessage("hi")], {"configurable": {}})
    assert len(warnings_of(caplog)) == 1


async def test_a_preload_node_without_a_place_for_its_block_warns_once(service, caplog):
    worker = RecordingWorker()
    graph = _graph(service, worker, with_context_key=False)
    config = {"configurable": {"thread_id": "x", **ALICE}}
    with caplog.at_level(logging.WARNING):
        graph.invoke({"messages": [HumanMessage("hi")]}, config)
        await graph.ainvoke({"messages": [HumanMessage("again")]}, config)
    messages = warnings_of(caplog)
    assert len(messages) == 1, messages
    assert "no 'memory_context' key" in messages[0] and "model=" in messages[0]
    declared = _graph(service, worker)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        declared.invoke({"messages": [HumanMessage("hi")]}, config)
    assert warnings_of(caplog) == []
    with_model = _graph(
        service, worker, with_context_key=False, model=ScriptedChatModel(default="ok")
    )
    with caplog.at_level(logging.WARNING):
        with_model.invoke({"messages": [HumanMessage("hi")]}, config)
    assert warnings_of(caplog) == []
