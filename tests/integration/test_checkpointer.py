"""MemoryCheckpointer: exactly one hand-off per completed run, never an error in the graph."""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import DetectedCapabilities
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from langmem_trpc import MemoryCheckpointer, UserKey
from langmem_trpc.testing import ScriptedChatModel, tool_call

from .conftest import ExplodingWorker, RecordingWorker


def _config(thread: str = "t1", **extra: Any) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, "app_name": "demo", "user_id": "alice", **extra}}


@tool
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"{topic}: fine"


@tool
def ask_human(question: str) -> str:
    """Ask the human and wait for the answer."""
    return str(interrupt(question))


@tool
def crash(topic: str) -> str:
    """A tool that fails without handling."""
    raise RuntimeError("tool crashed")


def _agent(worker: Any, replies: list[Any], tools: list[Any] | None = None) -> Any:
    model = ScriptedChatModel(replies=replies)
    return create_agent(
        model, tools=tools or [], checkpointer=MemoryCheckpointer(InMemorySaver(), worker)
    )


async def _run(graph: Any, inputs: Any, config: dict[str, Any], mode: str, **kwargs: Any) -> Any:
    if mode == "async":
        return await graph.ainvoke(inputs, config, **kwargs)
    return await asyncio.to_thread(graph.invoke, inputs, config, **kwargs)


MODES = ["sync", "async"]


@pytest.mark.parametrize("mode", MODES)
async def test_plain_agent_one_job_per_run(mode: str, worker: RecordingWorker):
    graph = _agent(worker, ["hello", "again"])
    await _run(graph, {"messages": [HumanMessage("hi")]}, _config(), mode)
    assert len(worker.jobs) == 1
    user, thread, messages = worker.jobs[0]
    assert (user, thread) == (UserKey("demo", "alice"), "t1")
    assert [m.content for m in messages] == ["hi", "hello"]
    await _run(graph, {"messages": [HumanMessage("more")]}, _config(), mode)
    assert len(worker.jobs) == 2
    assert [m.content for m in worker.jobs[1][2]] == ["hi", "hello", "more", "again"]
    assert (worker.async_calls > 0) == (mode == "async")


@pytest.mark.parametrize("mode", MODES)
async def test_agent_with_tool_calls_one_job(mode: str, worker: RecordingWorker):
    replies = [
        AIMessage("", tool_calls=[tool_call("lookup", {"topic": "go"})]),
        AIMessage("", tool_calls=[tool_call("lookup", {"topic": "rust"})]),
        "done",
    ]
    graph = _agent(worker, replies, [lookup])
    await _run(graph, {"messages": [HumanMessage("check")]}, _config(), mode)
    assert len(worker.jobs) == 1
    assert len(worker.jobs[0][2]) == 6


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
async def test_every_durability_mode(mode: str, durability: str, worker: RecordingWorker):
    replies = [AIMessage("", tool_calls=[tool_call("lookup", {"topic": "go"})]), "done"]
    graph = _agent(worker, replies, [lookup])
    await _run(graph, {"messages": [HumanMessage("check")]}, _config(), mode, durability=durability)
    assert len(worker.jobs) == 1


@pytest.mark.parametrize("mode", MODES)
async def test_interrupt_then_resume_fires_once_after_resume(mode: str, worker: RecordingWorker):
    replies = [
        AIMessage("", tool_calls=[tool_call("ask_human", {"question": "which version?"})]),
        "noted",
    ]
    graph = _agent(worker, replies, [ask_human])
    await _run(graph, {"messages": [HumanMessage("upgrade")]}, _config(), mode)
    assert worker.jobs == []
    await _run(graph, Command(resume="1.24"), _config(), mode)
    assert len(worker.jobs) == 1
    assert worker.jobs[0][2][-1].content == "noted"


@pytest.mark.parametrize("mode", MODES)
async def test_crashing_tool_enqueues_nothing(mode: str, worker: RecordingWorker):
    replies = [AIMessage("", tool_calls=[tool_call("crash", {"topic": "go"})]), "unreachable"]
    graph = _agent(worker, replies, [crash])
    with pytest.raises(RuntimeError, match="tool crashed"):
        await _run(graph, {"messages": [HumanMessage("x")]}, _config(), mode)
    assert worker.jobs == []


@pytest.mark.parametrize("mode", MODES)
async def test_subgraph_fires_only_for_the_root(mode: str, worker: RecordingWorker):
    inner = StateGraph(MessagesState)
    inner.add_node("reply", lambda state: {"messages": [AIMessage("from subgraph")]})
    inner.add_edge(START, "reply")
    outer = StateGraph(MessagesState)
    outer.add_node("sub", inner.compile())
    outer.add_node("final", lambda state: {"messages": [AIMessage("final")]})
    outer.add_edge(START, "sub")
    outer.add_edge("sub", "final")
    graph = outer.compile(checkpointer=MemoryCheckpointer(InMemorySaver(), worker))
    await _run(graph, {"messages": [HumanMessage("x")]}, _config(), mode)
    assert len(worker.jobs) == 1
    assert [m.content for m in worker.jobs[0][2]] == ["x", "from subgraph", "final"]


class FanState(TypedDict):
    messages: Annotated[list, operator.add]


@pytest.mark.parametrize("mode", MODES)
async def test_parallel_branches_fire_once(mode: str, worker: RecordingWorker):
    builder = StateGraph(FanState)
    builder.add_node("a", lambda s: {"messages": [AIMessage("a")]})
    builder.add_node("b", lambda s: {"messages": [AIMessage("b")]})
    builder.add_node("join", lambda s: {"messages": [AIMessage("joined")]})
    builder.add_edge(START, "a")
    builder.add_edge(START, "b")
    builder.add_edge(["a", "b"], "join")
    graph = builder.compile(checkpointer=MemoryCheckpointer(InMemorySaver(), worker))
    await _run(graph, {"messages": [HumanMessage("x")]}, _config(), mode)
    assert len(worker.jobs) == 1


@pytest.mark.parametrize("mode", MODES)
async def test_no_identity_or_no_messages_is_a_quiet_no_op(mode: str, worker: RecordingWorker):
    graph = _agent(worker, ["hello"])
    await _run(
        graph, {"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "t"}}, mode
    )
    assert worker.jobs == []


async def test_default_app_name(worker: RecordingWorker):
    saver = MemoryCheckpointer(InMemorySaver(), worker, app_name="default-app")
    graph = create_agent(ScriptedChatModel(replies=["ok"]), checkpointer=saver)
    await graph.ainvoke(
        {"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "t", "user_id": "u"}}
    )
    assert worker.jobs[0][0] == UserKey("default-app", "u")


async def test_identity_from_context_reaches_the_hook(worker: RecordingWorker):
    graph = _agent(worker, ["ok"])
    await graph.ainvoke(
        {"messages": [HumanMessage("hi")]},
        {"configurable": {"thread_id": "t"}},
        context={"app_name": "ctx-app", "user_id": "ctx-user"},
    )
    assert worker.jobs[0][0] == UserKey("ctx-app", "ctx-user")


@pytest.mark.parametrize("mode", MODES)
async def test_a_failing_worker_never_fails_the_run(mode: str):
    graph = _agent(ExplodingWorker(), ["hello"])
    out = await _run(graph, {"messages": [HumanMessage("hi")]}, _config(), mode)
    assert out["messages"][-1].content == "hello"


async def test_update_state_does_not_fire(worker: RecordingWorker):
    graph = _agent(worker, ["hello"])
    await graph.aupdate_state(_config(), {"messages": [HumanMessage("edited")]})
    assert worker.jobs == []


def test_forwards_versions_allowlist_and_capabilities(worker: RecordingWorker):
    class StrVersions(InMemorySaver):
        def get_next_version(self, current: Any, channel: None) -> str:
            return f"{int(str(current or '0').split('.')[0]) + 1:08d}.x"

    saver = MemoryCheckpointer(StrVersions(), worker)
    assert saver.get_next_version(None, None) == "00000001.x"
    clone = saver.with_allowlist([("mod", "Cls")])
    assert isinstance(clone, MemoryCheckpointer)
    assert clone.worker is worker


def test_extended_capabilities_appear_only_when_the_inner_saver_has_them(worker: RecordingWorker):
    class WithCopy(InMemorySaver):
        copied: list[tuple[str, str]] = []

        def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
            self.copied.append((source_thread_id, target_thread_id))

        async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
            self.copy_thread(source_thread_id, target_thread_id)

    class WithCopyAndPrune(WithCopy):
        async def aprune(self, thread_ids: Any, *, strategy: str = "keep_latest") -> None:
            pass

    def detected(saver: Any) -> set[str]:
        return {c.value for c in DetectedCapabilities.from_instance(saver).detected}

    base = {"put", "put_writes", "get_tuple", "list", "delete_thread"}
    plain = MemoryCheckpointer(InMemorySaver(), worker)
    extended = MemoryCheckpointer(WithCopy(), worker)
    both = MemoryCheckpointer(WithCopyAndPrune(), worker)
    assert detected(plain) == base
    assert detected(extended) == base | {"copy_thread"}
    assert detected(both) == base | {"copy_thread", "prune"}
    assert isinstance(extended, MemoryCheckpointer) and isinstance(both, MemoryCheckpointer)
    extended.copy_thread("a", "b")
    assert WithCopy.copied == [("a", "b")]


async def test_conformance_around_in_memory_saver():
    @checkpointer_test(name="MemoryCheckpointer(InMemorySaver)")
    async def factory():
        yield MemoryCheckpointer(InMemorySaver(), RecordingWorker())

    report = await validate(factory)
    assert report.passed_all_base()
    assert report.passed_all()


@pytest.mark.parametrize("mode", MODES)
async def test_conditional_skip_of_a_join_source_still_fires_once(
    mode: str, worker: RecordingWorker
):
    builder = StateGraph(FanState)
    builder.add_node("a", lambda s: {"messages": [AIMessage("a")]})
    builder.add_node("b", lambda s: {"messages": [AIMessage("b")]})
    builder.add_node("join", lambda s: {"messages": [AIMessage("joined")]})
    builder.add_edge(START, "a")
    builder.add_edge(["a", "b"], "join")
    graph = builder.compile(checkpointer=MemoryCheckpointer(InMemorySaver(), worker))
    await _run(graph, {"messages": [HumanMessage("x")]}, _config(), mode)
    assert len(worker.jobs) == 1
    assert [m.content for m in worker.jobs[0][2]] == ["x", "a"]
