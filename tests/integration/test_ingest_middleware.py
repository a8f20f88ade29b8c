"""MemoryIngestMiddleware: the after_agent trigger, once per completed run."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, interrupt

from langmem_trpc import MemoryIngestMiddleware, UserKey
from langmem_trpc.testing import ScriptedChatModel, tool_call

from .conftest import ExplodingWorker, RecordingWorker

CONFIG = {"configurable": {"thread_id": "t1", "app_name": "demo", "user_id": "alice"}}


@tool
def ask_human(question: str) -> str:
    """Ask the human and wait."""
    return str(interrupt(question))


def _agent(worker: Any, replies: list[Any], tools: list[Any] | None = None) -> Any:
    return create_agent(
        ScriptedChatModel(replies=replies),
        tools=tools or [],
        middleware=[MemoryIngestMiddleware(worker)],
        checkpointer=InMemorySaver(),
    )


async def _run(agent: Any, inputs: Any, config: dict[str, Any], mode: str) -> Any:
    if mode == "async":
        return await agent.ainvoke(inputs, config)
    return await asyncio.to_thread(agent.invoke, inputs, config)


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_one_job_per_completed_run_with_interrupt(mode: str, worker: RecordingWorker):
    replies = [
        AIMessage("", tool_calls=[tool_call("ask_human", {"question": "which?"})]),
        "ok",
        "again",
    ]
    agent = _agent(worker, replies, [ask_human])
    await _run(agent, {"messages": [HumanMessage("go")]}, CONFIG, mode)
    assert worker.jobs == []
    await _run(agent, Command(resume="1.24"), CONFIG, mode)
    assert len(worker.jobs) == 1
    user, thread, messages = worker.jobs[0]
    assert (user, thread, messages[-1].content) == (UserKey("demo", "alice"), "t1", "ok")
    await _run(agent, {"messages": [HumanMessage("more")]}, CONFIG, mode)
    assert len(worker.jobs) == 2
    assert (worker.async_calls > 0) == (mode == "async")


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_identity_from_context_and_missing_identity(mode: str, worker: RecordingWorker):
    agent = _agent(worker, ["a", "b"])
    await _run(agent, {"messages": [HumanMessage("x")]}, {"configurable": {"thread_id": "t"}}, mode)
    assert worker.jobs == []
    inputs = {"messages": [HumanMessage("y")]}
    if mode == "async":
        await agent.ainvoke(
            inputs, {"configurable": {"thread_id": "t"}}, context={"app_name": "c", "user_id": "u"}
        )
    else:
        agent.invoke(
            inputs, {"configurable": {"thread_id": "t"}}, context={"app_name": "c", "user_id": "u"}
        )
    assert worker.jobs[0][0] == UserKey("c", "u")


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_failing_worker_never_fails_the_run(mode: str):
    out = await _run(
        _agent(ExplodingWorker(), ["hello"]), {"messages": [HumanMessage("hi")]}, CONFIG, mode
    )
    assert out["messages"][-1].content == "hello"
