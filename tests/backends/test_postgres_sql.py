"""The PostgreSQL backend's statements (`backends/postgres/_sql.py`) as the server plans them."""

from __future__ import annotations

import psycopg
import pytest

from langmem_trpc import Memory, PostgresMemoryService, UserKey
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
    from langmem_trpc.service._core import build_memory, fingerprint

    by_fp = {fingerprint(build_memory(t, limits=svc.limits)): t for t in texts}
    with psycopg.connect(svc._conninfo, autocommit=True) as conn:
        rows = conn.execute(
            _sql.KNOWN_FINGERPRINTS, _sql.user_params(user, fps=list(by_fp))
        ).fetchall()
    return {by_fp[fp] for (fp,) in rows}
