"""MemoryCheckpointer around LangGraph's PostgreSQL savers (real PostgreSQL)."""

from __future__ import annotations

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

from langmem_trpc import MemoryCheckpointer, UserKey
from langmem_trpc.testing import ScriptedChatModel

from .conftest import RecordingWorker

pytestmark = pytest.mark.postgres


async def test_conformance_around_async_postgres_saver(pg_url: str):
    @checkpointer_test(name="MemoryCheckpointer(AsyncPostgresSaver)")
    async def factory():
        async with AsyncPostgresSaver.from_conn_string(pg_url) as saver:
            await saver.setup()
            yield MemoryCheckpointer(saver, RecordingWorker())

    report = await validate(factory)
    assert report.passed_all_base(), report.results
    assert report.passed_all(), {k: v.failures for k, v in report.results.items()}


def test_hook_fires_once_per_run_on_the_sync_postgres_saver(pg_url: str):
    worker = RecordingWorker()
    with PostgresSaver.from_conn_string(pg_url) as saver:
        saver.setup()
        agent = create_agent(
            ScriptedChatModel(replies=["one", "two"]),
            checkpointer=MemoryCheckpointer(saver, worker),
        )
        config = {"configurable": {"thread_id": "pg", "app_name": "demo", "user_id": "alice"}}
        agent.invoke({"messages": [HumanMessage("a")]}, config)
        agent.invoke({"messages": [HumanMessage("b")]}, config)
    assert [(u, t, len(m)) for u, t, m in worker.jobs] == [
        (UserKey("demo", "alice"), "pg", 2),
        (UserKey("demo", "alice"), "pg", 4),
    ]
