"""SQLite's side of validity and supersede (#26): the migration of existing files, the
schema it leaves, and the candidate masks that keep old versions out of a search's pool.
The backend-neutral rules are the conformance suite's (tests/backends/test_sqlite.py)."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta, timezone

import pytest

from langmem_trpc import (
    Entry,
    InvalidInputError,
    InvalidTimeError,
    Memory,
    SearchOptions,
    UserKey,
)
from langmem_trpc.backends.sqlite import MIGRATIONS, SQLiteMemoryService
from langmem_trpc.backends.sqlite._keyword import register_functions, scope_prefix_v1
from langmem_trpc.backends.sqlite._sql import CREATE_MIGRATIONS_TABLE, stored_fingerprint, to_us
from langmem_trpc.testing import HashingEmbeddings
from langmem_trpc.types import FusionSettings

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
    """FindPredecessor and the default read are index lookups, not scans of the file."""
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
            " ORDER BY updated_at DESC, created_at DESC, id DESC",
            ("a", "u"),
        ).fetchall()
    assert "memories_predecessor" in str(predecessor)
    assert "memories_updated" in str(current)


def _entry(user, mid, text, begin, **validity) -> Entry:
    return Entry(
        id=mid,
        app_name=user.app_name,
        user_id=user.user_id,
        memory=Memory(text=text),
        created_at=begin,
        updated_at=begin,
        valid_from=begin,
        **validity,
    )


def _chain(svc, user, n: int, start: datetime = T0) -> list[str]:
    """`n` versions of one fact written back as an export holds them (`restore`), each
    closed by the next, the last current; returns their ids, oldest first."""
    ids = [f"v{i}" for i in range(n)]
    for i, mid in enumerate(ids):
        begin = start + timedelta(days=i)
        last = i == n - 1
        text = f"Production runs Go version 1.{i} on the cluster"
        end = None if last else begin + timedelta(days=1)
        link = None if last else ids[i + 1]
        svc.restore(user, _entry(user, mid, text, begin, valid_to=end, superseded_by=link))
    return ids


OTHERS = [
    "Deploys to production on Fridays",
    "The cluster runs in Frankfurt",
    "Go modules are vendored",
]


def _service(tmp_path, leg: str) -> SQLiteMemoryService:
    if leg == "vector":
        return SQLiteMemoryService(tmp_path / "m.db", HashingEmbeddings())
    svc = SQLiteMemoryService(tmp_path / "m.db")
    if leg == "postings":  # every search on the in-memory keyword index
        svc._caches.keywords.fts_searches = 0
        svc._caches.keywords.background = False
    return svc


@pytest.mark.parametrize("leg", ["fts", "postings", "vector"])
def test_a_long_chain_never_crowds_current_memories_out_of_the_pool(tmp_path, leg):
    """150 old versions outscore every other memory; the view masks them where each leg
    picks candidates, so a pool of 20 still holds the current memories only, and the
    past is there when asked for."""
    svc = _service(tmp_path, leg)
    ids = _chain(svc, ALICE, 150)
    for i, text in enumerate(OTHERS):
        svc.restore(ALICE, _entry(ALICE, f"o{i}", text, T0))
    query = "production go cluster version"
    options = SearchOptions(query=query, max_results=10, fusion=FusionSettings(min_pool=20))
    hits = svc.search(ALICE, options=options)
    assert {e.text for e in hits} == {"Production runs Go version 1.149 on the cluster", *OTHERS}
    assert all(not e.superseded and e.valid_to is None for e in hits)
    past = svc.search(ALICE, options=options.model_copy(update={"include_superseded": True}))
    assert len(past) == 10 and sum(e.superseded for e in past) >= 7
    as_of = T0 + timedelta(days=40, hours=12)
    then = svc.search(ALICE, options=options.model_copy(update={"as_of": as_of}))
    assert [e.id for e in then if e.id.startswith("v")] == [ids[40]]
    assert svc.count(ALICE) == 4 and svc.get(ALICE, ids[0]).superseded_by == ids[1]
    svc.close()


def test_read_count_and_users_follow_the_view(tmp_path):
    """read's view, count without superseded rows, users with a current row; a lapsed
    (not superseded) row leaves the default read but still counts."""
    svc = SQLiteMemoryService(tmp_path / "m.db")
    ids = _chain(svc, ALICE, 3)
    lapsed = _entry(BOB, "lapsed", "In Tokyo until Friday", T0, valid_to=T0 + timedelta(days=3))
    svc.restore(BOB, lapsed)
    assert [e.id for e in svc.read(ALICE)] == [ids[2]]
    assert {e.id for e in svc.read(ALICE, include_superseded=True)} == set(ids)
    assert [e.id for e in svc.read(ALICE, as_of=T0 + timedelta(days=1, hours=1))] == [ids[1]]
    assert [e.id for e in svc.read(ALICE, as_of="2024-05-01")] == []  # before v0's start
    assert svc.read(BOB) == [] and svc.count(BOB) == 1
    assert [e.id for e in svc.read(BOB, as_of=T0 + timedelta(days=1))] == ["lapsed"]
    assert svc.count(ALICE) == 1 and svc.users() == [ALICE, BOB]
    with pytest.raises(InvalidTimeError, match="as_of"):
        svc.read(ALICE, as_of="not a date")
    with pytest.raises(InvalidInputError, match="include_superseded"):
        svc.read(ALICE, as_of=T0, include_superseded=True)
    svc.close()


def test_a_reembed_moves_every_version_to_the_new_model(tmp_path):
    """Superseded versions keep a vector of the current model, so `as_of` and
    `include_superseded` searches still have their vector leg after a re-embed."""
    path = tmp_path / "m.db"
    svc = SQLiteMemoryService(path, HashingEmbeddings())
    ids = _chain(svc, ALICE, 3)
    report = svc.reembed(HashingEmbeddings(size=64, seed="new"))
    assert report.embedded >= 3
    with sqlite3.connect(path) as conn:
        sizes = dict(conn.execute("SELECT id, length(embedding) FROM memories"))
    assert sizes == {mid: 64 * 4 for mid in ids}
    as_of = T0 + timedelta(days=1, hours=1)
    then = svc.search(ALICE, "Go version", SearchOptions(as_of=as_of, hybrid=False))
    assert [e.id for e in then] == [ids[1]]
    svc.close()


def test_a_stored_row_becomes_an_entry_with_every_field(tmp_path):
    """`row_to_entry` names every field of Entry and Memory (it skips pydantic's
    defaults), so a field added to either must be read from the row too."""
    svc = SQLiteMemoryService(tmp_path / "m.db")
    svc.restore(ALICE, _entry(ALICE, "x", "Runs Go", T0, valid_to=T0 + timedelta(days=1)))
    entry = svc.get(ALICE, "x")
    assert set(vars(entry)) == set(Entry.model_fields)
    assert set(vars(entry.memory)) == set(Memory.model_fields)
    assert entry.valid_to == T0 + timedelta(days=1) and entry.model_dump()["valid_from"] == T0
    svc.close()


def test_a_query_without_tokens_scans_only_the_versions_of_its_view(tmp_path):
    """ "C#" has no token: the literal fallback scans rows in SQL, with the view's
    conditions, so old versions stay out unless asked for."""
    svc = SQLiteMemoryService(tmp_path / "m.db")
    end = T0 + timedelta(days=1)
    svc.restore(ALICE, _entry(ALICE, "old", "Writes C#", T0, valid_to=end, superseded_by="new"))
    svc.restore(ALICE, _entry(ALICE, "new", "Writes C# and F#", T0 + timedelta(days=1)))
    assert [e.id for e in svc.search(ALICE, "C#")] == ["new"]
    past = SearchOptions(query="C#", include_superseded=True)
    assert {e.id for e in svc.search(ALICE, options=past)} == {"old", "new"}
    then = SearchOptions(query="C#", as_of=T0 + timedelta(hours=1))
    assert [e.id for e in svc.search(ALICE, options=then)] == ["old"]
    svc.close()
