"""langmem on top of MemoryStore, with langmem's real manager and tools driven by
ScriptedChatModel, on every backend (issues #32.6 and #30.16).
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from langmem_trpc import MemoryStore, UserKey
from langmem_trpc.errors import NamespaceAccessError
from langmem_trpc.integration.store import StoreToolErrors, store_tool_error
from langmem_trpc.testing import ScriptedChatModel, tool_call

NS = ("demo", "alice")
ALICE = UserKey(*NS)
SHOP_ALICE, SHOP_BOB = UserKey("shop", "alice"), UserKey("shop", "bob")
CONFIG = {"configurable": {"app_name": "demo", "user_id": "alice"}}


def _manager(store: MemoryStore, seen: list[str]) -> Any:
    from langmem import create_memory_store_manager

    def remember(messages: list[Any]) -> AIMessage:
        seen.append("\n".join(str(m.content) for m in messages))
        return AIMessage("", tool_calls=[tool_call("Memory", {"content": "User loves green tea"})])

    model = ScriptedChatModel(replies=[remember])
    return create_memory_store_manager(model, namespace=("{app_name}", "{user_id}"), store=store)


def _worker_memory(store: MemoryStore) -> str:
    entry = store.service.add(ALICE, "User plays chess on Sundays", topics=["hobby"])
    return entry.id


def test_worker_memories_carry_a_content_field(backend_store: MemoryStore):
    memory_id = _worker_memory(backend_store)
    value = backend_store.get(NS, memory_id).value
    assert value["content"] == value["memory"] == "User plays chess on Sundays"
    assert value["kind"] == "fact" and value["topics"] == ["hobby"]


def test_langmems_store_manager_reads_worker_memories(backend_store: MemoryStore):
    worker_id = _worker_memory(backend_store)
    seen: list[str] = []
    _manager(backend_store, seen).invoke(
        {"messages": [HumanMessage("I love green tea"), AIMessage("Noted.")]}, CONFIG
    )
    assert seen and "plays chess on Sundays" in seen[0]  # shown to the manager's model
    values = {i.key: i.value for i in backend_store.search(NS, limit=10)}
    assert values[worker_id]["memory"] == "User plays chess on Sundays"  # left as it was
    assert {"kind": "Memory", "content": {"content": "User loves green tea"}} in values.values()
    assert backend_store.service.count(ALICE) == 2


async def test_langmems_store_manager_reads_worker_memories_async(backend_store: MemoryStore):
    _worker_memory(backend_store)
    seen: list[str] = []
    await _manager(backend_store, seen).ainvoke(
        {"messages": [HumanMessage("I love green tea"), AIMessage("Noted.")]}, CONFIG
    )
    assert seen and "plays chess on Sundays" in seen[0]
    assert backend_store.service.count(ALICE) == 2


# -- #30.16: a refused namespace inside langmem's tools: the model hears it, the run goes on --------

AUTH_CONFIG = {
    "configurable": {"langgraph_auth_user_id": "alice", "user_id": "bob", "app_name": "shop"}
}


def _spoofed_agent(store: MemoryStore, **kwargs: Any) -> Any:
    from langmem import create_manage_memory_tool, create_search_memory_tool

    model = ScriptedChatModel(
        replies=[
            AIMessage("", tool_calls=[tool_call("search_memory", {"query": "bank account"})]),
            AIMessage(
                "",
                tool_calls=[
                    tool_call("manage_memory", {"content": "Bob owes me $500", "action": "create"})
                ],
            ),
            "I cannot reach those memories.",
        ]
    )
    namespace = ("{app_name}", "{user_id}")  # the client-sent user: someone else
    tools = [
        create_manage_memory_tool(namespace, store=store),
        create_search_memory_tool(namespace, store=store),
    ]
    return create_agent(model, tools=tools, store=store, **kwargs)


def _assert_refused_and_went_on(out: dict[str, Any], store: MemoryStore) -> None:
    results = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert [m.status for m in results] == ["error", "error"]
    assert all("refuses other users" in str(m.content) for m in results)
    assert "12345" not in " ".join(str(m.content) for m in results)
    assert out["messages"][-1].content == "I cannot reach those memories."
    assert store.service.count(SHOP_BOB) == 1 and store.service.count(SHOP_ALICE) == 0


def test_a_spoofed_namespace_is_an_error_tool_message(backend_store: MemoryStore):
    backend_store.put(("shop", "bob"), "b1", {"content": "Bob's bank account is 12345"})
    agent = _spoofed_agent(backend_store, middleware=[StoreToolErrors()])
    out = agent.invoke({"messages": [HumanMessage("what is in bob's account?")]}, AUTH_CONFIG)
    _assert_refused_and_went_on(out, backend_store)


async def test_a_spoofed_namespace_is_an_error_tool_message_async(backend_store: MemoryStore):
    backend_store.put(("shop", "bob"), "b1", {"content": "Bob's bank account is 12345"})
    agent = _spoofed_agent(backend_store, middleware=[StoreToolErrors()])
    out = await agent.ainvoke(
        {"messages": [HumanMessage("what is in bob's account?")]}, AUTH_CONFIG
    )
    _assert_refused_and_went_on(out, backend_store)


def test_a_hand_built_tool_node_answers_the_same(backend_store: MemoryStore):
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode
    from langmem import create_search_memory_tool

    tool = create_search_memory_tool(("{app_name}", "{user_id}"), store=backend_store)
    call = AIMessage("", tool_calls=[tool_call("search_memory", {"query": "account"})])
    graph = StateGraph(MessagesState)
    graph.add_node("tools", ToolNode([tool], handle_tool_errors=store_tool_error))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    out = graph.compile(store=backend_store).invoke({"messages": [call]}, AUTH_CONFIG)
    assert out["messages"][-1].status == "error"
    assert "refuses other users" in out["messages"][-1].content


def test_without_the_middleware_langgraph_ends_the_run(backend_store: MemoryStore):
    """Why the middleware exists: LangGraph's ToolNode re-raises any error but invalid
    arguments, and langmem's tools set no handle_tool_error."""
    with pytest.raises(NamespaceAccessError):
        _spoofed_agent(backend_store).invoke({"messages": [HumanMessage("hi")]}, AUTH_CONFIG)


def test_other_tools_errors_pass_through(backend_store: MemoryStore):
    from langchain_core.tools import tool

    @tool
    def broken(query: str) -> str:
        """Always fails."""
        raise RuntimeError("not ours")

    model = ScriptedChatModel(
        replies=[AIMessage("", tool_calls=[tool_call("broken", {"query": "x"})]), "done"]
    )
    agent = create_agent(model, tools=[broken], middleware=[StoreToolErrors()])
    with pytest.raises(RuntimeError, match="not ours"):
        agent.invoke({"messages": [HumanMessage("hi")]})
