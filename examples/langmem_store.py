"""Example 3: langmem's memory tools on `MemoryStore`, the BaseStore adapter.

langmem's `create_manage_memory_tool` / `create_search_memory_tool` take a
namespace template; `("{app_name}", "{user_id}")` maps onto the adapter's
`(app_name, user_id, *scope)` layout, filled from `configurable`. Under
LangGraph Server use `("{app_name}", "{langgraph_auth_user_id}")`: the store
refuses, in an authenticated run, any namespace of another user, and the
`StoreToolErrors` middleware hands such a refusal to the model as an error
tool message (the run goes on) instead of ending the run. The memories
land in the same service the rest of langmem_trpc uses (hybrid search,
history, the CLI).

Runs offline with a scripted model; set OPENAI_API_KEY (or OPENAI_BASE_URL) to
use a real one. Needs langmem: pip install langmem. Usage: python examples/langmem_store.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

try:
    from langchain.agents import create_agent
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
    from langmem import create_manage_memory_tool, create_search_memory_tool

    import langmem_trpc
except ImportError as exc:
    sys.exit(f"examples/langmem_store.py needs {exc.name or exc}: pip install langmem")
from langmem_trpc import MemoryStore, UserKey
from langmem_trpc.integration.store import StoreToolErrors
from langmem_trpc.models import chat_model_from_env
from langmem_trpc.testing import HashingEmbeddings, ScriptedChatModel, tool_call


def update_found(messages: list[BaseMessage]) -> AIMessage:
    found = json.loads(str(messages[-1].content))
    args = {
        "action": "update",
        "id": found[0]["key"],
        "content": "Prefers the window seat on long flights",
    }
    return AIMessage("", tool_calls=[tool_call("manage_memory", args)])


def model() -> BaseChatModel:
    real = chat_model_from_env()  # OPENAI_API_KEY, or OPENAI_BASE_URL alone (no key needed)
    if real is not None:
        return real
    return ScriptedChatModel(
        replies=[
            AIMessage(
                "", tool_calls=[tool_call("manage_memory", {"content": "Prefers the aisle seat"})]
            ),
            "Saved.",
            AIMessage("", tool_calls=[tool_call("search_memory", {"query": "seat preference"})]),
            update_found,
            "Updated: window seat on long flights.",
        ]
    )


def main() -> None:
    db_path = Path(tempfile.mkdtemp()) / "store.db"
    service = langmem_trpc.open(f"sqlite://{db_path}", embeddings=HashingEmbeddings())
    store = MemoryStore(service)
    namespace = ("{app_name}", "{user_id}")
    agent = create_agent(
        model(),
        tools=[create_manage_memory_tool(namespace), create_search_memory_tool(namespace)],
        store=store,
        middleware=[StoreToolErrors()],  # a store refusal in a tool reaches the model
    )
    config = {"configurable": {"app_name": "travel", "user_id": "sam", "thread_id": "1"}}
    agent.invoke({"messages": [HumanMessage("Remember that I like the aisle seat.")]}, config)
    out = agent.invoke(
        {"messages": [HumanMessage("Actually, window seat on long flights.")]}, config
    )
    print("agent:", out["messages"][-1].content)
    for item in store.search(("travel", "sam")):
        print("store item:", item.key, item.value)
    for entry in service.read(UserKey("travel", "sam")):
        print(
            "service view:",
            entry.text,
            [h.operation.value for h in service.history(entry.user, entry.id)],
        )
    service.close()


if __name__ == "__main__":
    main()
