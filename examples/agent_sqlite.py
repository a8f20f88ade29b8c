"""Example 1: a `create_agent` agent with long-term memory on SQLite.

* `MemoryPreloadMiddleware` puts the user's memories in the system message;
* `create_memory_tools` lets the model search them;
* `MemoryCheckpointer` hands each finished run to the background worker,
  which extracts memories with `LLMExtractor`.

Runs offline with scripted models; set OPENAI_API_KEY (or OPENAI_BASE_URL) to
use a real model. Usage: python examples/agent_sqlite.py [DB_PATH]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

try:
    from langchain.agents import create_agent
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver

    import langmem_trpc
except ImportError as exc:
    sys.exit(f"examples/agent_sqlite.py needs {exc.name or exc}: pip install .")
from langmem_trpc import (
    AutoMemoryWorker,
    LLMExtractor,
    MemoryCheckpointer,
    MemoryPreloadMiddleware,
    UserKey,
    create_memory_tools,
)
from langmem_trpc.models import chat_model_from_env
from langmem_trpc.testing import HashingEmbeddings, ScriptedChatModel, tool_call


def remember_user_statements(messages: list[BaseMessage]) -> AIMessage:
    """Offline stand-in for the extraction model: store what the user said about themselves."""
    said = [
        str(m.content) for m in messages if isinstance(m, HumanMessage) and "I " in str(m.content)
    ]
    calls = [
        tool_call("memory_add", {"memory": f"The user said: {text}", "topics": ["diet"]})
        for text in said
    ]
    # An extraction reply must call a memory tool or `nothing_to_remember`; an empty
    # reply is a failed job (logged, retried, then dead-lettered).
    return AIMessage("", tool_calls=calls or [tool_call("nothing_to_remember")])


def models() -> tuple[BaseChatModel, BaseChatModel]:
    model = chat_model_from_env()  # OPENAI_API_KEY, or OPENAI_BASE_URL alone (no key needed)
    if model is not None:
        return model, model
    agent = ScriptedChatModel(
        replies=[
            "Got it, vegetarian and no peanuts.",
            AIMessage("", tool_calls=[tool_call("memory_search", {"query": "diet allergies"})]),
            "How about a chickpea curry? It is vegetarian and peanut-free.",
        ]
    )
    return agent, ScriptedChatModel(replies=[], default=remember_user_statements)


def main(db_path: Path) -> None:
    service = langmem_trpc.open(f"sqlite://{db_path}", embeddings=HashingEmbeddings())
    agent_model, extraction_model = models()
    identity = {"app_name": "recipes", "user_id": "alice"}
    with AutoMemoryWorker(service, LLMExtractor(extraction_model)) as worker:
        agent = create_agent(
            agent_model,
            tools=create_memory_tools(service),
            system_prompt="You are a cooking assistant.",
            middleware=[MemoryPreloadMiddleware(service, preload=10)],
            checkpointer=MemoryCheckpointer(InMemorySaver(), worker),
        )
        first = agent.invoke(
            {"messages": [HumanMessage("I am vegetarian and I am allergic to peanuts.")]},
            {"configurable": {"thread_id": "monday", **identity}},
        )
        print("monday:", first["messages"][-1].content)
        worker.flush(timeout=60)  # wait for the extraction (a real app never needs to)
        for entry in service.read(UserKey("recipes", "alice")):
            print("remembered:", entry.text)
        second = agent.invoke(
            {"messages": [HumanMessage("Suggest a dinner for tonight.")]},
            {"configurable": {"thread_id": "friday", **identity}},
        )
        print("friday:", second["messages"][-1].content)
    service.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "memories.db")
