"""SQLite's side of validity and supersede (#26): the migration of existing files, the
schema it leaves, and the candidate masks that keep old versions out of a search's pool.
The backend-neutral rules are the conformance suite's (tests/backends/test_sqlite.py)."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta, timezone

from langmem_trpc import UserKey
from langmem_trpc.backends.sqlite import MIGRATIONS, SQLiteMemoryService
from langmem_trpc.backends.sqlite._keyword import register_functions, scope_prefix_v1
from langmem_trpc.backends.sqlite._sql import CREATE_MIGRATIONS_TABLE, stored_fingerprint, to_us

ALICE = UserKey("app", "alice")
BOB = UserKey("app", "bob")
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)

VALIDITY = next(v for v, m in enumerate(MIGRATIONS, 1) if any("valid_from" in s for s in m))
"""The schema version that added the validity columns."""


def _old_file(path, rows) -> None:
    """A file built by the migrations before validity, holding `rows` (user, id, text,
    event_time, created_at, deleted_at) with their FTS entries and user_state counts."""
    conn = sqlite3.connect(path)
    register_functions(conn)
    conn.create_function("lm_scope_v1", 2, scope_prefix_v1)
    conn.create_function("lm_fingerprint", 6, stored_fingerprint)
    with conn:
        conn.execute(CREATE_MIGRATIONS_TABLE)
        for version in range(1, VALIDITY):
            for statement in MIGRATIONS[version - 1]:
                conn.execute(statement)
            conn.execute("INSERT INTO langmem_migrations VALUES (?, 0)", (version,))
        for user, mid, text, event, created, deleted in rows:
            conn.execute(
                "INSERT INTO memories (app_name, user_id, id, text, fingerprint, kind,"
                " event_time, content_doc, content_len, created_at, updated_at, deleted_at)"
                " VALUES (?, ?, ?, ?, ?, 'fact', ?, lm_content_doc(?), 0, ?, ?, ?)",
                (user.app_name, user.user_id, mid, text, text.lower().encode(), to_us(event), text, to_us(created),
                 to_us(created), to_us(deleted)),
            )  # fmt: skip
        conn.execute("UPDATE memories SET content_len = lm_doc_len(content_doc)")
        conn.execute(
            "INSERT INTO memories_fts (rowid, content, topics) SELECT rid,"
            " lm_scoped(lm_scope(app_name, user_id), content_doc), '' FROM memories"
            " WHERE deleted_at IS NULL"
        )
        conn.execute(
            "INSERT INTO user_state (app_name, user_id, generation, version, n_live,"
            " content_len, topic_len) SELECT app_name, user_id, 'g', 1,"
            " count(*), sum(content_len), 0 FROM memories WHERE deleted_at IS NULL"
            " GROUP BY app_name, user_id"
        )
    conn.close()


def test_an_existing_file_migrates_to_current_rows_from_event_or_creation_time(tmp_path):
    """Existing rows become current: valid_from = event time, else creation time; no
    end, no link. The live-fingerprint index and the triggers know the new columns."""
    path = tmp_path / "old.db"
    dated, undated, gone = T0 - timedelta(days=30), T0 - timedelta(days=1), T0
    _old_file(
        path,
        [
            (ALICE, "a", "Runs Go 1.23 in production", dated, T0, None),
            (ALICE, "b", "Prefers tea over coffee", None, undated, None),
            (ALICE, "c", "Lives in Berlin", None, gone, gone + timedelta(hours=1)),
            (BOB, "d", "Bob drinks coffee", None, T0, None),
        ],
    )
    svc = SQLiteMemoryService(path)
    with sqlite3.connect(path) as conn:
        stored = {
            mid: (frm, to, by)
            for mid, frm, to, by in conn.execute(
                "SELECT id, valid_from, valid_to, superseded_by FROM memories"
            )
        }
        (index,) = conn.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'memories_live_fingerprint'"
        ).fetchone()
        state = conn.execute(
            "SELECT n_live, n_superseded, n_ending FROM user_state WHERE user_id = 'alice'"
        ).fetchone()
    assert stored == {
        "a": (to_us(dated), None, None),
        "b": (to_us(undated), None, None),
        "c": (to_us(gone), None, None),
        "d": (to_us(T0), None, None),
    }
    assert "superseded_by IS NULL" in index
    assert state == (2, 0, 0)
    entries = {e.id: e for e in svc.read(ALICE)}
    assert set(entries) == {"a", "b"}
    assert entries["a"].valid_from == dated and entries["a"].valid_to is None
    assert entries["b"].valid_from == undated and not entries["b"].superseded
    assert svc.count(ALICE) == 2 and svc.count(BOB) == 1
    assert [e.id for e in svc.search(ALICE, "Go production")] == ["a"]
    assert svc.get(ALICE, "a").valid_from == dated
    svc.close()


def test_the_migration_leaves_indexes_for_predecessors_and_current_reads(tmp_path):
    """FindPredecessor and the default read are index lookups, not scans of the user."""
    svc = SQLiteMemoryService(tmp_path / "m.db")
    svc.close()
    with sqlite3.connect(tmp_path / "m.db") as conn:
        predecessor = conn.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM memories WHERE app_name = ? AND user_id = ?"
            " AND deleted_at IS NULL AND superseded_by = ?",
            ("a", "u", "x"),
        ).fetchall()
        current = conn.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM memories WHERE app_name = ? AND user_id = ?"
            " AND deleted_at IS NULL AND superseded_by IS NULL"
            " ORDER BY updated_at DESC",
            ("a", "u"),
        ).fetchall()
    assert "memories_predecessor" in str(predecessor)
    assert "memories_current_updated" in str(current)
