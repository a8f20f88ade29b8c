"""Example 2: a plain `StateGraph` with the preload node and `MemoryCheckpointer` (async).

`create_preload_node(service, model, preload=10)` is the model node: it calls
the model with the user's memories merged into the system message and
returns only the reply, so nothing about memory lands in the state.
`MemoryCheckpointer` wraps the graph's checkpointer and hands every finished
run to the worker. Identity travels in `configurable` (app_name, user_id).

Runs offline with scripted models; set OPENAI_API_KEY (or OPENAI_BASE_URL) to
use a real model. Usage: python examples/stategraph_checkpointer.py
"""

from __future__ import annotations

import asyncio
import sys

try:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, MessagesState, StateGraph

    import langmem_trpc
except ImportError as exc:
    sys.exit(f"examples/stategraph_checkpointer.py needs {exc.name or exc}: pip install .")
from langmem_trpc import (
    AutoMemoryWorker,
    LLMExtractor,
    MemoryCheckpointer,
    UserKey,
    create_preload_node,
)
from langmem_trpc.models import chat_model_from_env
from langmem_trpc.testing import HashingEmbeddings, ScriptedChatModel, tool_call


def extract_timezone(messages: list[BaseMessage]) -> AIMessage:
    said = " ".join(str(m.content) for m in messages if isinstance(m, HumanMessage))
    if "Tokyo" in said:
        return AIMessage(
            "", tool_calls=[tool_call("memory_add", {"memory": "Works from Tokyo (JST, UTC+9)"})]
        )
    return AIMessage("", tool_calls=[tool_call("nothing_to_remember")])


def models() -> tuple[BaseChatModel, BaseChatModel]:
    model = chat_model_from_env()  # OPENAI_API_KEY, or OPENAI_BASE_URL alone (no key needed)
    if model is not None:
        return model, model
    agent = ScriptedChatModel(
        replies=["Noted, Tokyo it is.", "09:00 JST works: that is 00:00 UTC."]
    )
    return agent, ScriptedChatModel(replies=[], default=extract_timezone)


async def main() -> None:
    service = langmem_trpc.open("memory://", embeddings=HashingEmbeddings())
    agent_model, extraction_model = models()
    async with AutoMemoryWorker(service, LLMExtractor(extraction_model)) as worker:
        builder = StateGraph(MessagesState)
        builder.add_node("agent", create_preload_node(service, agent_model, preload=10))
        builder.add_edge(START, "agent")
        graph = builder.compile(checkpointer=MemoryCheckpointer(InMemorySaver(), worker))

        def config(thread: str) -> dict[str, dict[str, str]]:
            return {
                "configurable": {"thread_id": thread, "app_name": "calendar", "user_id": "kenji"}
            }

        system = SystemMessage("You schedule meetings.")
        out = await graph.ainvoke(
            {"messages": [system, HumanMessage("I work from Tokyo.")]}, config("a")
        )
        print("thread a:", out["messages"][-1].content)
        await worker.aflush(timeout=60)  # wait for the extraction (a real app never needs to)
        out = await graph.ainvoke(
            {"messages": [system, HumanMessage("Book a 9am call.")]}, config("b")
        )
        print("thread b:", out["messages"][-1].content)
        stored = [
            type(m).__name__ for m in (await graph.aget_state(config("b"))).values["messages"]
        ]
        print("thread b state:", stored, "(no memory block stored)")
    for entry in await service.aread(UserKey("calendar", "kenji")):
        print("remembered:", entry.text)


if __name__ == "__main__":
    asyncio.run(main())
