"""The PostgreSQL backend's statements (`backends/postgres/_sql.py`) as the server plans them."""

from __future__ import annotations

import re

import psycopg
import pytest

from langmem_trpc import Limits, Memory, PostgresMemoryService, SearchOptions, UserKey
from langmem_trpc.backends.postgres import _sql

pytestmark = pytest.mark.postgres

ALICE = UserKey("app", "alice")


def _generic_plan(url: str, statement: str, args: str) -> str:
    """EXPLAIN ANALYZE of `statement` as the service's pools run it: a generic plan."""
    query = statement.replace("%(fps)s", "$1").replace("%(app)s", "$2").replace("%(user)s", "$3")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(f"PREPARE probe(text[], text, text) AS {query}")
        rows = conn.execute(f"EXPLAIN (ANALYZE, COSTS OFF) EXECUTE probe({args})").fetchall()
    return "\n".join(row[0] for row in rows)


def test_known_fingerprints_never_compares_every_row_with_every_fingerprint(pg_module_url):
    """`add_many`'s lookup of the batch's fingerprints: the deleted rows are probed through
    their own index, and no plan compares each of the user's rows with each element of the
    array (`fingerprint = ANY(...)` under a generic plan did: 0.4 s per 1,000 memories at
    10,000 rows)."""
    with PostgresMemoryService(pg_module_url) as svc:
        svc.setup()
        svc.add_many(ALICE, [Memory(text=f"memory number {i}") for i in range(300)])
        fps = [f"{i:064x}" for i in range(300)]
        plan = _generic_plan(
            pg_module_url, _sql.KNOWN_FINGERPRINTS, "'{" + ",".join(fps) + "}', 'app', 'alice'"
        )
    assert "langmem_memories_deleted_fingerprint" in plan
    assert "Rows Removed by Join Filter" not in plan


def test_known_fingerprints_finds_live_and_deleted_rows(pg_module_url):
    with PostgresMemoryService(pg_module_url) as svc:
        svc.setup()
        user = UserKey("app", "known")
        _, gone = svc.add_many(user, ["kept memory", "deleted memory"])
        svc.delete(user, gone.id)
        found = _known(svc, user, ["kept memory", "deleted memory", "never added"])
    assert found == {"kept memory", "deleted memory"}


def _known(svc: PostgresMemoryService, user: UserKey, texts: list[str]) -> set[str]:
    from langmem_trpc.service.rules import build_memory, fingerprint

    by_fp = {fingerprint(build_memory(t, limits=svc.limits)): t for t in texts}
    with psycopg.connect(svc._conninfo, autocommit=True) as conn:
        rows = conn.execute(
            _sql.KNOWN_FINGERPRINTS, _sql.user_params(user, fps=list(by_fp))
        ).fetchall()
    return {by_fp[fp] for (fp,) in rows}


def _generic_explain(conn: psycopg.Connection, statement: str) -> str:
    """EXPLAIN (GENERIC_PLAN) of a statement with named parameters: the plan the
    service's pools (force_generic_plan) run, whatever the values."""
    names: list[str] = []

    def positional(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    query = re.sub(r"%\((\w+)\)[sb]", positional, statement)
    rows = conn.execute(f"EXPLAIN (GENERIC_PLAN, COSTS OFF) {query}").fetchall()
    return "\n".join(row[0] for row in rows)


def test_current_view_adds_no_sequential_scan_for_a_heavy_user(pg_module_url):
    """A heavy user (above exact_search_max and the keyword scan limit) with a chain of
    100 versions of one fact: the default view's filter sits inside the one hybrid
    statement without adding a sequential scan of the memories to the plan of the
    statement without it (every version's; the ones both have are small users'
    branches, behind a one-time filter); `read()`'s current view walks the partial
    index of current rows. The ANN function's plan: `test_ann_function_scans_...`."""
    from datetime import datetime, timedelta, timezone

    from langmem_trpc.backends.postgres import _search_sql
    from langmem_trpc.service import steps
    from langmem_trpc.service.rules import fingerprint
    from langmem_trpc.testing import HashingEmbeddings
    from langmem_trpc.types import Entry

    heavy, t0 = UserKey("app", "heavy"), datetime(2025, 1, 1, tzinfo=timezone.utc)
    versions = [
        Entry(
            id=f"v{i}",
            app_name="app",
            user_id="heavy",
            memory=Memory(text=f"Runs Go 1.{i}"),
            created_at=t0,
            updated_at=t0,
            valid_from=t0 + timedelta(days=i),
            valid_to=None if i == 99 else t0 + timedelta(days=i + 1),
            superseded_by=None if i == 99 else f"v{i + 1}",
        )
        for i in range(100)
    ]

    def chain() -> steps.Plan[None]:
        vectors = yield steps.Embed(tuple(e.text for e in versions))
        rows = zip(versions, vectors, strict=True)
        yield steps.Insert(
            heavy, tuple(steps.NewRow(e, fingerprint(e.memory), False, v) for e, v in rows)
        )

    with PostgresMemoryService(
        pg_module_url, HashingEmbeddings(), limits=Limits(capacity=None)
    ) as svc:
        svc.setup()
        svc.add_many(heavy, [Memory(text=f"note {i} about topic {i % 97}") for i in range(2_500)])
        svc.run_plan(chain())
        query = HashingEmbeddings().embed_query("go version")
        options = SearchOptions(query="go version", hybrid=True)
        views = {"current": options, "all": options.model_copy(update={"include_superseded": True})}
        with psycopg.connect(pg_module_url, autocommit=True) as conn:
            conn.execute("ANALYZE langmem_memories")
            plans = {
                (leg, view): _generic_explain(
                    conn,
                    _search_sql.build_search(
                        heavy, views[view], None, 30, query, 2_000, heavy=leg == "heavy"
                    ).sql,
                )
                for leg in ("sql", "heavy")
                for view in views
            }
            read = _generic_explain(conn, _sql.READ_LIVE["current"])
        assert svc.search(heavy, "runs go 1.99", options)[0].id == "v99"
    seq_scan = "Seq Scan on langmem_memories"
    for leg in ("sql", "heavy"):
        current, every = plans[leg, "current"], plans[leg, "all"]
        assert current.count(seq_scan) <= every.count(seq_scan), (leg, current)
    assert "langmem_memories_current" in read
