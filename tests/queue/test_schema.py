"""procrastinate's schema upgrades by `PostgresJobQueue.setup()` on the suite's real PostgreSQL.

An older schema is built the way procrastinate itself built it: its migration files
applied in order, up to (not including) the installed version's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from langchain_core.messages import HumanMessage

from langmem_trpc import UserKey
from langmem_trpc.backends.postgres import PostgresMemoryService
from langmem_trpc.errors import ConfigurationError
from langmem_trpc.extraction import VerbatimExtractor
from langmem_trpc.queue import PostgresJobQueue, QueueWorker
from langmem_trpc.queue._schema import migrations

ROOT = Path(__file__).resolve().parents[2]
FILES = migrations()
OLDER = [f for f in FILES if f.stem[:8] < FILES[-1].stem[:8]]  # before the last version's
"""The installed procrastinate's migrations of every version but its last."""


def build_older(url: str, *, record: bool) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for path in OLDER:
            conn.execute(path.read_text(encoding="utf-8"))
        if record:
            conn.execute(
                "CREATE TABLE langmem_queue_schema (migration text PRIMARY KEY,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            conn.execute("INSERT INTO langmem_queue_schema VALUES (%s)", (OLDER[-1].stem,))


def functions(url: str) -> dict[str, str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid) FROM pg_proc p"
            " WHERE proname LIKE 'procrastinate%' AND prokind IN ('f', 'p')"
        ).fetchall()
    return dict(rows)


def recorded(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [r[0] for r in conn.execute("SELECT migration FROM langmem_queue_schema ORDER BY 1")]


def has_table(url: str, name: str) -> bool:
    with psycopg.connect(url) as conn:
        return bool(conn.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()[0])  # type: ignore[index]


def test_the_older_schema_lacks_what_the_last_version_adds(pg_url: str) -> None:
    assert OLDER and len(OLDER) < len(FILES)
    build_older(pg_url, record=False)
    assert "procrastinate_retry_job_v2" not in " ".join(functions(pg_url))  # 3.10's addition


def test_setup_applies_the_migrations_a_recorded_older_schema_lacks(
    pg_url: str, pg_server: object
) -> None:
    build_older(pg_url, record=True)
    with PostgresJobQueue(pg_url) as queue:
        queue.setup()
        assert recorded(pg_url) == [f.stem for f in FILES if f.stem >= OLDER[-1].stem]
        fresh = pg_server.create_database("schema_fresh")  # type: ignore[attr-defined]
        try:
            with PostgresJobQueue(fresh) as other:
                other.setup()
            assert functions(pg_url) == functions(fresh)  # the same functions, same bodies
        finally:
            pg_server.drop_database(fresh)  # type: ignore[attr-defined]
        service = PostgresMemoryService(pg_url, pool_size=2)
        service.setup()
        user = UserKey("schema", "alice")
        queue.enqueue(user, "t", [HumanMessage("I keep bees", id="m1")])
        QueueWorker(pg_url, service, VerbatimExtractor(), poll_interval=0.2).run(drain=True)
        assert [e.text for e in service.read(user)] == ["I keep bees"]
        service.close()


def test_an_older_schema_without_a_record_fails_fast_naming_the_fix(pg_url: str) -> None:
    build_older(pg_url, record=False)
    before = functions(pg_url)
    with PostgresJobQueue(pg_url) as queue, pytest.raises(ConfigurationError) as caught:
        queue.setup()
    message = str(caught.value)
    assert "procrastinate_retry_job_v2" in message and "--migrations-path" in message
    assert "langmem_queue_schema" in message
    assert functions(pg_url) == before and not has_table(pg_url, "langmem_queue_schema")


def test_a_schema_newer_than_the_installed_procrastinate_is_refused(pg_url: str) -> None:
    with PostgresJobQueue(pg_url) as queue:
        queue.setup()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("INSERT INTO langmem_queue_schema VALUES ('99.00.00_01_future')")
        with pytest.raises(ConfigurationError, match="upgrade procrastinate"):
            queue.setup()


def test_an_unrecorded_current_schema_is_recorded_as_current(pg_url: str) -> None:
    from procrastinate.schema import SchemaManager

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(SchemaManager.get_schema())  # what `procrastinate schema --apply` does
    with PostgresJobQueue(pg_url) as queue:
        queue.setup()
    assert recorded(pg_url) == [FILES[-1].stem]


def test_replicas_starting_at_once_migrate_once(pg_url: str) -> None:
    build_older(pg_url, record=True)
    code = (
        "import sys; from langmem_trpc.queue import PostgresJobQueue as Q; Q(sys.argv[1]).setup()"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, pg_url], cwd=ROOT, stderr=subprocess.PIPE)
        for _ in range(4)
    ]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, errors
    assert recorded(pg_url) == [f.stem for f in FILES if f.stem >= OLDER[-1].stem]
    assert "procrastinate_retry_job_v2" in " ".join(functions(pg_url))
