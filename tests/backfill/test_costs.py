"""Cost accounting: every extraction job records its model calls and tokens."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

import langmem_trpc
from langmem_trpc import AutoMemoryWorker, InMemoryMemoryService, LLMExtractor, UserKey
from langmem_trpc.cli import cli
from langmem_trpc.testing import ScriptedChatModel

from ._history import conversation, put_history

USER = UserKey("app", "u1")
USAGE = {"input_tokens": 120, "output_tokens": 30, "total_tokens": 150}


def paid_model() -> ScriptedChatModel:
    """Answers every call with one memory_add and the usage a provider would report."""

    def reply(messages: Any) -> AIMessage:
        text = next(m.content for m in reversed(messages) if m.type == "human")
        call = {"name": "memory_add", "args": {"memory": f"said: {text}"}, "id": "c1"}
        return AIMessage("", tool_calls=[call], usage_metadata=USAGE)

    return ScriptedChatModel(default=reply)


def test_job_report_and_worker_stats_count_calls_and_tokens() -> None:
    worker = AutoMemoryWorker(InMemoryMemoryService(), LLMExtractor(paid_model()), batch_messages=1)
    report = worker.process(
        USER, "t1", [HumanMessage("I like tea", id="a"), HumanMessage("I like jazz", id="b")]
    )
    worker.close()
    assert (report.batches, report.model_calls) == (2, 2)
    assert (report.input_tokens, report.output_tokens) == (240, 60)
    stats = worker.stats()
    assert (stats.model_calls, stats.input_tokens, stats.output_tokens) == (2, 240, 60)


def test_backfill_summary_shows_the_cost() -> None:
    saver = InMemorySaver()
    put_history(
        saver,
        "t1",
        conversation("t1", ["2025-03-01", "2025-03-09"]),
        {"user_id": "u1", "app_name": "app"},
    )
    report = langmem_trpc.backfill(saver, InMemoryMemoryService(), LLMExtractor(paid_model()))
    assert (report.model_calls, report.input_tokens, report.output_tokens) == (2, 240, 60)
    assert report.as_dict()["input_tokens"] == 240


@pytest.mark.postgres
def test_jobs_status_shows_each_user_s_cost(pg_url: str, tmp_path: Path) -> None:
    from langmem_trpc.queue import PostgresJobQueue, QueueWorker

    with langmem_trpc.open(pg_url) as service, PostgresJobQueue(pg_url) as queue:
        queue.setup()
        queue.enqueue(USER, "t1", [HumanMessage("I like tea", id="a")])
        queue.enqueue(UserKey("app", "u2"), "t2", [HumanMessage("I like jazz", id="b")])
        QueueWorker(pg_url, service, LLMExtractor(paid_model())).run(drain=True)
        assert queue.costs()["app/u1"] == {
            "jobs": 1,
            "model_calls": 1,
            "input_tokens": 120,
            "output_tokens": 30,
        }
    result = CliRunner().invoke(cli, ["jobs", "status", "--db", pg_url])
    assert result.exit_code == 0, result.output
    assert "app/u1: 1 model call(s) in 1 job(s), 120 input / 30 output tokens" in result.output
    data = json.loads(CliRunner().invoke(cli, ["jobs", "status", "--db", pg_url, "--json"]).stdout)
    assert data["costs"]["app/u2"]["input_tokens"] == 120
