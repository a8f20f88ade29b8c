from __future__ import annotations

import gc
import hashlib
import itertools
import multiprocessing
import random
import sqlite3
import sys
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

from langmem_trpc import (
    BackendError,
    CapacityExceededError,
    ExtractionCursor,
    InMemoryMemoryService,
    InvalidMemoryError,
    Kind,
    Limits,
    Memory,
    Operation,
    SearchOptions,
    Source,
    UserKey,
)
from langmem_trpc.backends.sqlite import MIGRATIONS, SQLiteMemoryService
from langmem_trpc.backends.sqlite._keyword import scope_prefix, scoped
from langmem_trpc.service.bm25 import (
    CorpusStats,
    KeywordDoc,
    QueryTerms,
    keyword_score,
    score_candidates,
)
from langmem_trpc.service.documents import fts_document, keyword_doc, topics_document
from langmem_trpc.testing import HashingEmbeddings
from langmem_trpc.testing.conformance import MemoryServiceConformance


class TestSQLiteWithEmbeddings(MemoryServiceConformance):
    @pytest.fixture
    def service(self, tmp_path):
        return SQLiteMemoryService(tmp_path / "m.db", HashingEmbeddings())

    @pytest.fixture
    def service_url(self, tmp_path):
        return f"sqlite://{tmp_path / 'm.db'}"

    @pytest.fixture
    def make_service(self, tmp_path):
        files = itertools.count()  # a fresh file each call, as `service` is
        return lambda limits: SQLiteMemoryService(
            tmp_path / f"limited{next(files)}.db", HashingEmbeddings(), limits=limits
        )


class TestSQLiteKeywordOnly(MemoryServiceConformance):
    @pytest.fixture
    def service(self, tmp_path):
        return SQLiteMemoryService(tmp_path / "m.db")

    @pytest.fixture
    def service_url(self, tmp_path):
        return f"sqlite://{tmp_path / 'm.db'}"

    @pytest.fixture
    def make_service(self, tmp_path):
        files = itertools.count()
        return lambda limits: SQLiteMemoryService(
            tmp_path / f"limited{next(files)}.db", limits=limits
        )


# -- SQLite-specific behaviour -------------------------------------------------------

ALICE = UserKey("app", "alice")
BOB = UserKey("app", "bob")
T0 = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)

#: sha256 of each shipped migration. Append a hash for a new migration; never
#: change an existing one (databases in the field already ran it).
PINNED_MIGRATIONS = [
    "4f8ab22d3f60e9490bba3e39fc08a7ca9c6ecf320e0ebad909699ff9d61ac520",
    "9917c197d1edd1a65893ef9417a865ff916cae3f62dda2994c6cb15cc4753efe",
    "f1cb918a08809f1257ee32515b622d6282631cca7d0ecb8473ed7a615fc18bbe",
    "816fb66cfe5b5fa3827ffbf2a850f0657df255e5269447362afcec8809bc08d5",
    "10b331ae7bc60f9dcc7892db8837539bc16010911bec84242963c85549411efc",
    "aa7c28b39645a437aaab7ae5b13958314d56f3f4ba8eedb7b182e545d6687974",  # cursor keys, attempts, dead letters
    "99e8fa0a579811ac68e5c341b0f1e21b87ac3f018a72630ccb750cce274cf185",  # expires_at (store TTL)
    "f6f6fe3e4c1143be5723b9df398000df835c4121719c104307857e7d3c46c4d6",
    "176cafa9d81875e4f8ab015441148838e381a2b3c6cc6927d28dd9946fbdbbe4",  # langmem_settings (language)
    "9e8700faf0bd8557fe19485eded6dd44f2ba519828b237c0bcae02d468acbbc9",  # participants, location keys
    "2d58b614797e4a5480f9029f878797547a2f3c4dc4b801b9996722ff5d71260b",  # reembed_vectors (#27)
    "505870b6c08b841568266ced88b3c63109384dd726d9e52a8ce2a8c6ac3b5b16",  # validity (#26)
]


def assert_index_consistent(path) -> None:
    """FTS holds exactly the live rows, each under its user's prefixed terms."""
    with sqlite3.connect(path) as conn:
        conn.create_function("lm_scoped", 2, scoped)
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        conn.execute("INSERT INTO memories_fts(memories_fts) VALUES ('integrity-check')")
        rows = conn.execute(
            "SELECT rid, app_name, user_id, content_doc FROM memories WHERE deleted_at IS NULL"
        ).fetchall()
        indexed = {rid for (rid,) in conn.execute("SELECT rowid FROM memories_fts")}
        assert indexed == {rid for rid, *_ in rows}
        for rid, app, uid, doc in rows:
            for token in set(doc.split()):
                term = '"' + scope_prefix(UserKey(app, uid)) + token + '"'
                hits = conn.execute(
                    "SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?", (term,)
                )
                assert rid in {r for (r,) in hits}


def assert_state_consistent(path) -> None:
    """user_state's counts equal a recount of the live rows (inserts count in code)."""
    with sqlite3.connect(path) as conn:
        state = {
            (a, u): rest
            for a, u, *rest in conn.execute(
                "SELECT app_name, user_id, n_live, content_len, topic_len, n_superseded,"
                " n_ending FROM user_state"
            )
            if rest[0]
        }
        recount = {
            (a, u): rest
            for a, u, *rest in conn.execute(
                "SELECT app_name, user_id, count(*), sum(content_len), sum(topic_len),"
                " count(superseded_by), count(valid_to)"
                " FROM memories WHERE deleted_at IS NULL GROUP BY app_name, user_id"
            )
        }
    assert state == recount


def test_every_write_path_keeps_the_index_consistent(tmp_path):
    svc = SQLiteMemoryService(tmp_path / "m.db", limits=Limits(capacity=5, on_capacity="evict"))
    a = svc.add(ALICE, "Drinks green tea", topics=["tea"])
    svc.add(ALICE, "drinks GREEN tea.", topics=["drinks"])  # topic refresh
    b = svc.add(ALICE, "Lives in Berlin 绿茶")
    svc.update(ALICE, b.id, "Lives in Paris 乌龙茶", topics=["city"])
    svc.delete(ALICE, a.id)
    svc.add(ALICE, "Drinks green tea")  # revive
    svc.add(ALICE, "keyed value", memory_id="k1")
    svc.add(ALICE, "keyed value two", memory_id="k1")  # upsert
    for i in range(6):
        svc.add(ALICE, f"filler memory {i}")  # evictions
    svc.add(BOB, "bob memory")
    svc.purge(ALICE, b.id)
    svc.restore(ALICE, svc.get(BOB, svc.read(BOB)[0].id).model_copy(update={"id": "r1"}))
    svc.add_many(BOB, ["bob batch one", "bob memory", "bob batch two 绿茶"])  # with a duplicate
    svc.add_many(ALICE, ["alice batch", "alice batch two"])  # at capacity: evicts
    go = svc.add(BOB, "Runs Go 1.23", valid_from=T0, valid_until=T0 + timedelta(days=1))
    newer = svc.update(BOB, go.id, "Runs Go 1.24", supersede=True)
    svc.restore_version(BOB, go.id)  # closes newer, reopens go
    svc.update(BOB, go.id, "Runs Go 1.25", supersede=True)
    svc.delete(BOB, newer.id)
    assert_index_consistent(svc.path)
    assert_state_consistent(svc.path)
    assert svc.read(BOB)[0].text == "Runs Go 1.25" and len(svc.versions(BOB, go.id)) == 2
    svc.clear(ALICE)
    assert_index_consistent(svc.path)
    assert_state_consistent(svc.path)
    svc.add(ALICE, "after clear")
    svc.purge(BOB)
    assert_index_consistent(svc.path)
    assert_state_consistent(svc.path)
    assert [e.text for e in svc.search(ALICE, "after clear")] == ["after clear"]
    svc.close()


def test_stemmed_docs_migration_rebuilds_documents_and_fts(tmp_path):
    """A file written by the unstemmed tokenizer is re-tokenised on open: documents,
    lengths, user_state sums and the FTS index, so "hike" finds "Hiked"."""
    path = tmp_path / "old.db"
    svc = SQLiteMemoryService(path)
    svc.add(ALICE, "Hiked the ridge at dawn", topics=["Mountains"])
    svc.add(ALICE, "Bought new boots")
    svc.close()
    conn = sqlite3.connect(path)
    conn.create_function("lm_scoped", 2, scoped)
    with conn:  # the unstemmed tokenizer's documents and FTS rows, then "before" the migration
        prefix = scope_prefix(ALICE)
        conn.execute("INSERT INTO memories_fts (memories_fts) VALUES ('delete-all')")
        conn.execute("UPDATE memories SET content_doc = 'hiked ridge at dawn', content_len = 4")
        conn.execute(
            "INSERT INTO memories_fts (rowid, content, topics) "
            "SELECT rid, lm_scoped(?, content_doc), lm_scoped(?, topic_doc) FROM memories",
            (prefix, prefix),
        )
    conn.close()
    (stemmed,) = [m for m in MIGRATIONS if any("lm_content_doc(text)" in s for s in m)]
    svc = SQLiteMemoryService(path)  # later migrations cannot run twice: run this one again
    svc._db.write(lambda conn: [conn.execute(statement) for statement in stemmed])
    assert [e.text for e in svc.search(ALICE, "hike")] == ["Hiked the ridge at dawn"]
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT text, content_doc, content_len FROM memories").fetchall()
    state = conn.execute("SELECT content_len FROM user_state").fetchone()[0]
    conn.close()
    for text, doc, length in rows:
        assert doc == fts_document(text) and length == len(doc.split())
    assert state == sum(length for _, _, length in rows)
    svc.close()


def test_shipped_migrations_are_never_edited():
    hashes = [hashlib.sha256("\n".join(m).encode()).hexdigest() for m in MIGRATIONS]
    assert hashes[: len(PINNED_MIGRATIONS)] == PINNED_MIGRATIONS
    assert len(hashes) == len(PINNED_MIGRATIONS), "pin the hash of the new migration"


def test_migrations_are_idempotent(tmp_path):
    path = tmp_path / "m.db"
    for _ in range(3):
        SQLiteMemoryService(path).close()
    with sqlite3.connect(path) as conn:
        versions = [v for (v,) in conn.execute("SELECT version FROM langmem_migrations")]
        assert versions == list(range(1, len(MIGRATIONS) + 1))
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_version_1_file_upgrades_and_keeps_its_counts(tmp_path):
    """Migration 2 drops the insert trigger: rows counted by it and rows counted in
    code add up."""
    path = tmp_path / "m.db"
    with sqlite3.connect(path) as conn:
        conn.create_function("lm_scoped", 2, scoped)
        conn.execute(
            "CREATE TABLE langmem_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER)"
        )
        for statement in MIGRATIONS[0]:
            conn.execute(statement)
        conn.execute("INSERT INTO langmem_migrations VALUES (1, 0)")
        conn.execute(  # counted by the version-1 trigger
            "INSERT INTO memories (app_name, user_id, id, text, fingerprint, kind, content_doc,"
            " content_len, created_at, updated_at) VALUES (?, ?, 'old', 'zero', x'00', 'fact',"
            " 'zero', 1, 1, 1)",
            (ALICE.app_name, ALICE.user_id),
        )
    SQLiteMemoryService(path).close()  # applies migration 2 only
    with sqlite3.connect(path) as conn:
        triggers = {
            n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        }
    assert "memories_after_insert" not in triggers
    svc = SQLiteMemoryService(path)
    svc.add(ALICE, "one")
    svc.add_many(ALICE, ["two", "three"])
    assert svc.count(ALICE) == 4
    assert_state_consistent(path)
    svc.close()


def test_a_version_2_file_moves_separator_users_to_the_injective_prefix(tmp_path, monkeypatch):
    """Migration 3: users whose ids hold U+001F were indexed under the ambiguous
    prefix; after the upgrade every live row sits under `scope_prefix` (the FTS
    integrity check passes) and search, update and delete work. Migration 4
    numbers existing rows in their old eviction order."""
    from langmem_trpc.backends.sqlite import _keyword

    path = tmp_path / "m.db"
    x, y = UserKey("a\x1fb", "c"), UserKey("a", "b\x1fc")
    with monkeypatch.context() as m:  # write as version 2 did: one prefix for x and y
        m.setattr(_keyword, "scope_prefix_of", _keyword.scope_prefix_v1)
        assert scope_prefix(x) == scope_prefix(y)
        svc = SQLiteMemoryService(path)
        first = svc.add(x, "zebra stripes")
        svc.add(y, "zebra crossing")
        svc.add(ALICE, "zebra at the zoo")
        svc.add(x, "lions sleep")
        svc.close()
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM langmem_migrations WHERE version > 2")
        conn.execute("DROP INDEX memories_write_seq")
        conn.execute("ALTER TABLE memories DROP COLUMN write_seq")
        undo_later_migrations(conn)
    svc = SQLiteMemoryService(path)  # applies 3 and 4 (and every later one)
    assert scope_prefix(x) != scope_prefix(y)
    assert_index_consistent(path)
    assert [e.text for e in svc.search(x, "zebra")] == ["zebra stripes"]
    assert [e.text for e in svc.search(y, "zebra")] == ["zebra crossing"]
    assert [e.text for e in svc.search(ALICE, "zebra")] == ["zebra at the zoo"]
    svc.update(x, first.id, "zebra stripes, updated")
    assert svc.delete(y, svc.read(y)[0].id)
    assert_index_consistent(path)
    svc.close()
    with sqlite3.connect(path) as conn:
        seqs = [s for (s,) in conn.execute("SELECT write_seq FROM memories ORDER BY rid")]
    assert seqs[1:4] == [2, 3, 4] and seqs[0] > 4  # old order, then the update


def undo_later_migrations(conn):
    """Undo the schema changes of the migrations after 5, so a test can re-run them
    from an older version (each one below adds columns or tables)."""
    for table in ("thread_attempts", "dead_letters", "langmem_settings"):
        conn.execute(f"DROP TABLE {table}")
    for column in ("message_keys", "retired_keys", "pending_retries"):
        conn.execute(f"ALTER TABLE cursors DROP COLUMN {column}")
    conn.execute("DROP INDEX memories_expiring")
    conn.execute("ALTER TABLE memories DROP COLUMN expires_at")
    undo_validity_migration(conn)


def undo_validity_migration(conn):
    """Back to the schema before validity (#26): its columns, indexes and triggers."""
    for name in ("memories_after_update", "memories_after_delete"):
        conn.execute(f"DROP TRIGGER {name}")
    for name in ("memories_live_fingerprint", "memories_predecessor"):
        conn.execute(f"DROP INDEX {name}")
    for column in ("valid_from", "valid_to", "superseded_by"):
        conn.execute(f"ALTER TABLE memories DROP COLUMN {column}")
    for column in ("n_superseded", "n_ending"):
        conn.execute(f"ALTER TABLE user_state DROP COLUMN {column}")
    for statement in MIGRATIONS[0]:  # the original index and triggers
        if any(n in statement for n in ("live_fingerprint", "AFTER UPDATE", "AFTER DELETE")):
            conn.execute(statement)


def legacy_fingerprint(memory, explicit_id=None):
    """The content fingerprint before the participants encoding was made unambiguous."""
    import hashlib

    from langmem_trpc.service.text import normalize_text

    event = memory.event_time.strftime("%Y-%m-%dT%H:%M:%SZ") if memory.event_time else ""
    parts = [
        "text:" + normalize_text(memory.text),
        "kind:" + memory.kind.value,
        "event:" + event,
        "with:" + ",".join(p.casefold() for p in memory.participants),
        "at:" + (memory.location or "").casefold(),
    ]
    if explicit_id is not None:
        parts.append("id:" + explicit_id)
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def test_fingerprint_migration_recomputes_ambiguous_rows(tmp_path, monkeypatch):
    """Rows stored under the old participants encoding: after the migration, adding
    their content again refreshes them instead of creating a second memory, and a
    list that only looked the same stays a different memory."""
    from langmem_trpc.service import plans

    path = tmp_path / "m.db"
    with monkeypatch.context() as m:
        m.setattr(plans, "fingerprint", legacy_fingerprint)
        m.setattr(plans, "check_new_memory_id", str)  # chosen ids took any string then
        svc = SQLiteMemoryService(path)
        comma = svc.add(ALICE, "Met for lunch", participants=["Smith, John"])
        plain = svc.add(ALICE, "Plain memory", participants=["Ana", "Bob"])
        keyed = svc.add(ALICE, "Keyed memory", memory_id="k\x1f1", location="a\x1fb")
        svc.close()
    (statements,) = [m for m in MIGRATIONS if "lm_fingerprint" in "".join(m)]
    svc = SQLiteMemoryService(path)
    svc._db.write(lambda conn: [conn.execute(statement) for statement in statements])
    assert svc.add(ALICE, "met for lunch", participants=["smith, john"]).id == comma.id
    assert svc.add(ALICE, "Plain memory", participants=["Bob", "Ana"]).id == plain.id
    again = svc.add(ALICE, "Keyed memory, new", memory_id="k\x1f1", location="a\x1fb")
    assert again.id == keyed.id
    assert svc.add(ALICE, "Met for lunch", participants=["Smith", "John"]).id != comma.id
    assert svc.count(ALICE) == 4
    assert_index_consistent(path)
    svc.close()


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "m.db"
    SQLiteMemoryService(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO langmem_migrations VALUES (?, 0)", (len(MIGRATIONS) + 1,))
    with pytest.raises(BackendError, match="newer"):
        SQLiteMemoryService(path)


def test_data_persists_across_close_and_reopen(tmp_path):
    path = tmp_path / "nested" / "dir" / "m.db"
    svc = SQLiteMemoryService(path, HashingEmbeddings())
    entry = svc.add(
        ALICE,
        "Met Bob in Paris",
        kind=Kind.EPISODE,
        event_time=T0,
        participants=["Bob"],
        location="Paris",
        topics=["travel"],
        metadata={"n": 1, "nested": {"ok": [1, 2]}},
        source=Source(thread_id="t1", message_ids=["m1"], actor="worker"),
    )
    svc.update(ALICE, entry.id, "Met Bob in Lyon")
    svc.set_cursor(ALICE, ExtractionCursor(thread_id="t1", last_message_id="m1", message_count=1))
    history = svc.history(ALICE, entry.id)
    svc.close()
    with pytest.raises(BackendError):
        svc.get(ALICE, entry.id)

    again = SQLiteMemoryService(str(path), HashingEmbeddings())
    got = again.get(ALICE, entry.id)
    assert got is not None and got.text == "Met Bob in Lyon"
    assert got.memory.event_time == T0  # microseconds survive
    assert got.created_at == entry.created_at
    assert got.memory.metadata == {"n": 1, "nested": {"ok": [1, 2]}}
    assert again.history(ALICE, entry.id) == history
    assert history[0].source == Source(thread_id="t1", message_ids=["m1"], actor="worker")
    assert again.get_cursor(ALICE, "t1").last_message_id == "m1"
    assert [e.id for e in again.search(ALICE, "Bob Lyon", SearchOptions(hybrid=True))] == [entry.id]
    again.close()


def test_in_memory_database_works():
    svc = SQLiteMemoryService(":memory:", HashingEmbeddings())
    svc.add(ALICE, "Likes green tea")
    assert [e.text for e in svc.search(ALICE, "green tea", SearchOptions(hybrid=True))] == [
        "Likes green tea"
    ]
    svc.close()


def test_two_instances_on_one_file_see_each_others_writes(tmp_path):
    path = tmp_path / "shared.db"
    a = SQLiteMemoryService(path, HashingEmbeddings())
    b = SQLiteMemoryService(path, HashingEmbeddings())
    a.add(ALICE, "Drinks espresso every morning")
    for options in (SearchOptions(), SearchOptions(hybrid=True)):
        assert len(a.search(ALICE, "espresso morning", options)) == 1  # warms a's caches
    added = b.add(ALICE, "Drinks espresso after lunch")
    for options in (SearchOptions(), SearchOptions(hybrid=True)):
        assert {e.id for e in a.search(ALICE, "espresso", options)} >= {added.id}
    b.delete(ALICE, added.id)
    for options in (SearchOptions(), SearchOptions(hybrid=True)):
        assert added.id not in {e.id for e in a.search(ALICE, "espresso", options)}
    b.purge(ALICE)
    a.add(ALICE, "Fresh start")  # new generation of alice's state: no stale cache
    assert [e.text for e in a.search(ALICE, "espresso fresh start")] == ["Fresh start"]
    assert a.count(ALICE) == b.count(ALICE) == 1
    a.close()
    b.close()


def test_keyword_only_data_gets_vectors_when_reopened_with_an_embedder(tmp_path):
    path = tmp_path / "m.db"
    plain = SQLiteMemoryService(path)
    plain.add(ALICE, "Upgraded the database servers")
    plain.add(ALICE, "Bakes sourdough bread")
    plain.close()
    svc = SQLiteMemoryService(path, HashingEmbeddings())
    hits = svc.search(ALICE, "database upgrade", SearchOptions(similarity_threshold=0.2))
    assert hits and hits[0].text == "Upgraded the database servers"
    svc.close()


FTS_SYNTAX = [
    '"',
    '""',
    '"hello',
    "NEAR(door",
    "NEAR",
    "near/2",
    "-- then",
    "-x",
    "*",
    "a*",
    "^start",
    "a OR b AND",
    "NOT x",
    "AND",
    "(",
    ")",
    "{content}: x",
    "content: x",
    "scope: x",
    ":",
    "'; DROP TABLE memories; --",
    "C#",
    "^$",
    "\\",
    "+",
    "col:val",
    "x:y:z",
    "🙂",
]


@pytest.mark.parametrize("embeddings", [None, HashingEmbeddings()])
def test_fts_syntax_in_text_and_queries_is_harmless(tmp_path, embeddings):
    svc = SQLiteMemoryService(tmp_path / "m.db", embeddings)
    for text in FTS_SYNTAX:
        svc.add(ALICE, f"note {text} end")
    svc.add(BOB, "bob's secret near the door")
    for query in FTS_SYNTAX:
        for options in (SearchOptions(), SearchOptions(hybrid=True), SearchOptions(kind="fact")):
            hits = svc.search(ALICE, query, options)
            assert all(h.user_id == "alice" for h in hits)
    near = svc.search(ALICE, "NEAR", SearchOptions(hybrid=True))
    assert any("NEAR(door" in h.text for h in near)
    # Another user's indexed term as query text cannot reach their rows.
    assert svc.search(ALICE, scope_prefix(BOB) + "secret") == []
    assert svc.search(ALICE, "secret") == []
    assert svc.count(ALICE) == len(FTS_SYNTAX)
    with sqlite3.connect(svc.path) as conn:
        assert conn.execute("SELECT count(*) FROM memories").fetchone()[0] == len(FTS_SYNTAX) + 1
    svc.close()


def test_metadata_must_be_json(tmp_path):
    svc = SQLiteMemoryService(tmp_path / "m.db")
    with pytest.raises(InvalidMemoryError) as info:
        svc.add(ALICE, "has a set", metadata={"s": {1, 2}})
    assert info.value.field == "metadata"
    assert svc.count(ALICE) == 0
    svc.close()


def test_add_many_matches_add_and_is_atomic(tmp_path):
    svc = SQLiteMemoryService(tmp_path / "m.db", limits=Limits(capacity=3))
    entries = svc.add_many(ALICE, ["one", Memory(text="two", topics=["t"]), "One."])
    assert entries[0].id == entries[2].id  # idempotent within the batch
    assert svc.count(ALICE) == 2
    assert [h.operation for h in svc.history(ALICE, entries[1].id)] == [Operation.ADD]
    with pytest.raises(CapacityExceededError):
        svc.add_many(ALICE, ["three", "four"])
    assert svc.count(ALICE) == 2  # nothing of the failed batch was written
    with pytest.raises(InvalidMemoryError):
        svc.add_many(ALICE, ["fine", "   "])
    assert svc.count(ALICE) == 2
    svc.close()


@pytest.mark.parametrize("policy", ["evict", None])
def test_add_many_equals_adding_one_by_one(tmp_path, policy):
    limits = Limits(capacity=4, on_capacity="evict") if policy else Limits(capacity=None)
    one = SQLiteMemoryService(tmp_path / "one.db", limits=limits)
    many = SQLiteMemoryService(tmp_path / "many.db", limits=limits)
    for svc in (one, many):
        gone = svc.add(ALICE, "to be revived")
        svc.delete(ALICE, gone.id)
        svc.add(ALICE, "already here", topics=["a"])
    batch = [
        "new one", Memory(text="already here", topics=["b"]), "to be revived", "new one.",
        "new two", "new three", "new four",
    ]  # fmt: skip
    for item in batch:
        if isinstance(item, Memory):
            one.add(ALICE, item.text, topics=item.topics)
        else:
            one.add(ALICE, item)
    many.add_many(ALICE, batch)

    def summary(svc):
        return [
            (e.text, e.memory.topics, [h.operation for h in svc.history(ALICE, e.id)])
            for e in svc.read(ALICE)
        ]

    assert summary(many) == summary(one)
    assert many.count(ALICE) == one.count(ALICE)
    assert_index_consistent(many.path)
    one.close()
    many.close()


def test_restore_round_trips_ids_times_and_history(tmp_path):
    source = SQLiteMemoryService(tmp_path / "a.db")
    entry = source.add(ALICE, "Likes jazz", topics=["music"])
    source.update(ALICE, entry.id, "Likes jazz and blues")
    exported = source.get(ALICE, entry.id)
    history = source.history(ALICE, entry.id)
    target = SQLiteMemoryService(tmp_path / "b.db")
    target.restore(ALICE, exported, history)
    target.restore(ALICE, exported, history)  # replaces, does not duplicate
    assert target.get(ALICE, entry.id) == exported
    assert target.history(ALICE, entry.id) == history
    assert target.count(ALICE) == 1
    assert [e.id for e in target.search(ALICE, "blues")] == [entry.id]
    source.close()
    target.close()


def test_keyword_doc_from_stored_tokens_scores_like_the_reference():
    texts = [
        "Production runs Go 1.23 on Kubernetes",
        "喜欢喝绿茶和乌龙茶",
        "東京で寿司を食べた",
        "Vit à Montréal, aime le café crème",
        "go go go gadget",
        "绿茶 green tea 绿茶",
        "한국어 텍스트 검색",
        "x",
        "C# and F# developer",
    ]
    topics = [[], ["tea"], ["旅行", "food"], ["ville"], ["go"], [], ["언어"], [], ["dev"]]
    docs = [KeywordDoc.build(t, tp) for t, tp in zip(texts, topics, strict=True)]
    stats = CorpusStats.from_docs(docs)
    for query in [
        "go",
        "绿茶",
        "寿司 food",
        "montréal café",
        "go gadget go",
        "한국어",
        "green 绿茶",
    ]:
        terms = QueryTerms.build(query)
        for text, tp, doc in zip(texts, topics, docs, strict=True):
            rebuilt = keyword_doc(fts_document(text), topics_document(tp))
            assert rebuilt.content_tf == doc.content_tf and rebuilt.topic_tf == doc.topic_tf
            assert keyword_score(terms, rebuilt, stats) == keyword_score(terms, doc, stats)


def test_vectorised_keyword_scores_equal_the_shared_scorer_exactly():
    rng = random.Random(11)
    words = "alpha beta gamma what did you the dark mode 北京大学 咖啡店 C# x1 β go".split()
    for _ in range(400):
        texts = [
            " ".join(rng.choice(words) for _ in range(rng.randint(1, 12)))
            for _ in range(rng.randint(1, 25))
        ]
        topics = [[rng.choice(words) for _ in range(rng.randint(0, 3))] for _ in texts]
        docs = [
            keyword_doc(fts_document(t), topics_document(tp))
            for t, tp in zip(texts, topics, strict=True)
        ]
        full = CorpusStats.from_docs(
            KeywordDoc.build(t, tp) for t, tp in zip(texts, topics, strict=True)
        )
        stats = CorpusStats(
            n_docs=full.n_docs + rng.randint(0, 40),
            df=full.df,
            avg_content_len=full.avg_content_len,
            avg_topic_len=full.avg_topic_len,
        )
        terms = QueryTerms.build(" ".join(rng.choice(words) for _ in range(rng.randint(1, 5))))
        got = score_candidates(terms, docs, stats).tolist()
        assert got == [keyword_score(terms, doc, stats) for doc in docs]


def test_search_matches_the_in_memory_reference(tmp_path):
    rng = random.Random(7)
    words = "tea coffee go rust python hiking alps paris lyon cat dog jazz blues bread db".split()
    reference = InMemoryMemoryService(HashingEmbeddings(), limits=Limits(capacity=None))
    svc = SQLiteMemoryService(tmp_path / "m.db", HashingEmbeddings(), limits=Limits(capacity=None))
    for i in range(60):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(2, 7))) + f" n{i}"
        kind = rng.choice(["fact", "episode"])
        event = T0 + timedelta(days=rng.randint(0, 30)) if kind == "episode" else None
        topics = rng.sample(words, rng.randint(0, 2))
        reference.add(ALICE, text, kind=kind, event_time=event, topics=topics)
        svc.add(ALICE, text, kind=kind, event_time=event, topics=topics)
    options = [
        SearchOptions(),
        SearchOptions(hybrid=True),
        SearchOptions(hybrid=True, kind="episode", kind_fallback=True),
        SearchOptions(hybrid=True, time_after=T0 + timedelta(days=10), max_results=20),
        SearchOptions(hybrid=True, deduplicate=True, order_by_event_time=True),
    ]
    for query in ["tea coffee", "go rust python", "jazz", "hiking in the alps", "cat dog bread"]:
        for opt in options:
            want = [(e.text, round(e.score, 6)) for e in reference.search(ALICE, query, opt)]
            got = [(e.text, round(e.score, 6)) for e in svc.search(ALICE, query, opt)]
            assert got == want, (query, opt)
    keyword_ref = InMemoryMemoryService(limits=Limits(capacity=None))
    keyword_svc = SQLiteMemoryService(tmp_path / "k.db", limits=Limits(capacity=None))
    for entry in reversed(reference.read(ALICE)):
        keyword_ref.add(ALICE, entry.text, topics=entry.memory.topics)
        keyword_svc.add(ALICE, entry.text, topics=entry.memory.topics)
    for query in ["tea coffee", "go rust python", "jazz blues", "n1", "paris"]:
        want = [(e.text, round(e.score, 6)) for e in keyword_ref.search(ALICE, query)]
        got = [(e.text, round(e.score, 6)) for e in keyword_svc.search(ALICE, query)]
        assert got == want, query
    svc.close()
    keyword_svc.close()


def test_threads_with_separate_instances_never_see_locked(tmp_path):
    path = tmp_path / "m.db"
    SQLiteMemoryService(path).close()
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        svc = SQLiteMemoryService(path, limits=Limits(capacity=None))
        try:
            for i in range(25):
                svc.add(ALICE, f"thread {n} fact {i}")
                svc.add(ALICE, "everyone adds this")
                svc.search(ALICE, f"thread {n}")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            svc.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    svc = SQLiteMemoryService(path)
    assert svc.count(ALICE) == 4 * 25 + 1
    svc.close()


def _process_writer(path: str, n: int, count: int) -> None:
    svc = SQLiteMemoryService(path, HashingEmbeddings(), limits=Limits(capacity=None))
    for i in range(count):
        svc.add(UserKey("app", "shared"), f"process {n} memory {i}")
        svc.add(UserKey("app", "shared"), "every process adds this one")
        svc.add(UserKey("app", f"own-{n}"), f"private note {i}")
    svc.close()


@pytest.mark.slow
def test_several_processes_share_one_file(tmp_path):
    path = str(tmp_path / "m.db")
    SQLiteMemoryService(path).close()
    processes, count = 4, 30
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_process_writer, args=(path, n, count)) for n in range(processes)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    assert [w.exitcode for w in workers] == [0] * processes
    svc = SQLiteMemoryService(path)
    assert svc.count(UserKey("app", "shared")) == processes * count + 1
    for n in range(processes):
        assert svc.count(UserKey("app", f"own-{n}")) == count
    svc.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert_index_consistent(path)


def test_a_thread_s_connection_closes_when_the_thread_ends(tmp_path):
    svc = SQLiteMemoryService(tmp_path / "m.db")
    svc.add(ALICE, "opened on the main thread")
    threads = [threading.Thread(target=svc.count, args=(ALICE,)) for _ in range(8)]
    for t in threads:
        t.start()
        t.join()
    gc.collect()
    assert len(svc._db._held) == 1  # only the main thread's
    svc.close()


def _forked_child(svc: SQLiteMemoryService) -> None:
    svc.add(ALICE, "written by the forked child")
    svc.close()


@pytest.mark.skipif(sys.platform == "win32", reason="fork")
def test_a_forked_child_opens_its_own_connection(tmp_path):
    svc = SQLiteMemoryService(tmp_path / "m.db")
    svc.add(ALICE, "written by the parent")
    child = multiprocessing.get_context("fork").Process(target=_forked_child, args=(svc,))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    svc.add(ALICE, "parent again")
    assert svc.count(ALICE) == 3
    svc.close()
    assert_index_consistent(svc.path)


def test_keyword_leg_ranks_with_bm25_only_when_matches_exceed_the_cut(tmp_path):
    svc = SQLiteMemoryService(tmp_path / "m.db", keyword_candidates=3)
    for i in range(8):
        svc.add(ALICE, f"jazz {'jazz ' * (i % 3)}note {i}")
    svc.add(ALICE, "blues one")
    svc.add(ALICE, "blues two")
    # 8 matches > 3: only the 3 best by BM25 are rescored, so at most 3 come back.
    jazz = svc.search(ALICE, "jazz", SearchOptions(max_results=10, similarity_threshold=0.0))
    assert len(jazz) == 3 and all("jazz" in e.text for e in jazz)
    # 2 matches <= 3: both are scored without BM25 ordering, same order as the reference.
    reference = InMemoryMemoryService(limits=Limits(capacity=None))
    for entry in reversed(svc.read(ALICE)):
        reference.add(ALICE, entry.text)
    want = [e.text for e in reference.search(ALICE, "blues")]
    assert [e.text for e in svc.search(ALICE, "blues")] == want and len(want) == 2
    svc.close()


def test_search_after_own_add_many_extends_the_cached_matrix_instead_of_reloading(tmp_path):
    path = tmp_path / "m.db"
    svc = SQLiteMemoryService(path, HashingEmbeddings(), limits=Limits(capacity=None))
    svc.add_many(ALICE, [f"note {i} about tea" for i in range(20)])
    svc.search(ALICE, "tea", SearchOptions(hybrid=False))  # loads the matrix
    loads: list[str] = []
    svc._db.connection().set_trace_callback(
        lambda stmt: (
            loads.append(stmt) if "SELECT rid, kind, event_time, embedding" in stmt else None
        )
    )
    svc.add_many(ALICE, ["jazz in paris", Memory(text="blues in lyon", kind=Kind.EPISODE)])
    svc.add_many(ALICE, ["hiking the alps"])
    got = svc.search(ALICE, "blues lyon", SearchOptions(hybrid=False, max_results=30))
    assert loads == []
    fresh = SQLiteMemoryService(path, HashingEmbeddings(), limits=Limits(capacity=None))
    want = fresh.search(ALICE, "blues lyon", SearchOptions(hybrid=False, max_results=30))
    assert [(e.id, e.score) for e in got] == [(e.id, e.score) for e in want]
    cached, reloaded = svc._caches.vectors._items[ALICE], fresh._caches.vectors._items[ALICE]
    assert cached.stamp == reloaded.stamp
    for name in ("rids", "matrix", "kinds", "events"):
        assert getattr(cached, name).tobytes() == getattr(reloaded, name).tobytes(), name
    for name in ("valid_from", "valid_to", "superseded"):
        got_arr, want_arr = getattr(cached.validity, name), getattr(reloaded.validity, name)
        assert got_arr.tobytes() == want_arr.tobytes(), name
    # Another instance's write, a duplicate or a delete is not an own append: reload.
    fresh.add(ALICE, "rust and go")
    svc.add_many(ALICE, ["jazz in paris"])
    svc.delete(ALICE, got[0].id)
    after = svc.search(ALICE, "rust go", SearchOptions(hybrid=False, max_results=30))
    assert loads and after[0].text == "rust and go"
    assert got[0].id not in {e.id for e in after}
    svc.close()
    fresh.close()


def test_vector_scan_on_the_side_thread_gives_the_same_results(tmp_path, monkeypatch):
    """Large matrices are scanned on a side thread while FTS runs; results must not change."""
    from langmem_trpc.backends.sqlite import _query

    svc = SQLiteMemoryService(tmp_path / "m.db", HashingEmbeddings())
    user = UserKey("app", "side")
    rng = random.Random(3)
    words = [f"w{i}" for i in range(40)]
    svc.add_many(user, [" ".join(rng.choices(words, k=6)) for _ in range(120)])
    queries = [" ".join(rng.choices(words, k=3)) for _ in range(15)]

    def results() -> list[list[tuple[str, float | None, float | None]]]:
        return [[(e.id, e.score, e.rrf_score) for e in svc.search(user, q)] for q in queries]

    monkeypatch.setattr(_query, "SIDE_SCAN_MIN_VALUES", 10**12)
    inline = results()
    monkeypatch.setattr(_query, "SIDE_SCAN_MIN_VALUES", 0)
    side = results()
    assert inline == side
    assert any(inline)
    busy = threading.Lock()
    assert busy.acquire()  # a busy side thread: the scan runs inline instead
    monkeypatch.setattr(svc._caches.side, "_busy", busy)
    assert results() == inline


def test_backfilled_vectors_embed_the_text_alone(tmp_path):
    """Rows written without an embedder get `embedding_text` vectors (the text alone,
    participants left out) on the first vector search: one text, two participants,
    one score."""
    path = str(tmp_path / "m.db")
    user = UserKey("app", "alice")
    plain = SQLiteMemoryService(path)
    plain.add(user, "I went to the support group last night", participants=["Caroline"])
    plain.add(user, "I went to the support group last night", participants=["Melanie"])
    plain.close()
    service = SQLiteMemoryService(path, embeddings=HashingEmbeddings())
    vector_only = SearchOptions(hybrid=False, similarity_threshold=0.0)
    hits = service.search(user, "Caroline support group", vector_only)
    service.close()
    assert len(hits) == 2 and hits[0].score == pytest.approx(hits[1].score, abs=1e-6)


_SEARCH_THREADS = ("langmem-vector-scan", "langmem-keyword-index")


def _search_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(_SEARCH_THREADS)]


def _start_search_threads(svc: SQLiteMemoryService, user: UserKey) -> None:
    """Two searches of one state: the side scan runs each, the second queues an index build."""
    rng = random.Random(5)
    words = [f"w{i}" for i in range(30)]
    svc.add_many(user, [" ".join(rng.choices(words, k=5)) for _ in range(60)])
    for _ in range(2):
        assert svc.search(user, "w1 w2 w3")
    deadline = time.monotonic() + 10
    while svc._caches.keywords._building and time.monotonic() < deadline:
        time.sleep(0.01)


def test_close_stops_every_search_thread_and_services_share_none(tmp_path, monkeypatch):
    """Each service starts its own vector side-scan and keyword-index threads, and its
    close() stops them; closing one service leaves the other's running."""
    from langmem_trpc.backends.sqlite import _query

    monkeypatch.setattr(_query, "SIDE_SCAN_MIN_VALUES", 0)  # every hybrid scan on the side
    before = set(_search_threads())
    first = SQLiteMemoryService(tmp_path / "a.db", HashingEmbeddings())
    second = SQLiteMemoryService(tmp_path / "b.db", HashingEmbeddings())
    _start_search_threads(first, ALICE)
    own_first = set(_search_threads()) - before
    _start_search_threads(second, ALICE)
    own_second = set(_search_threads()) - before - own_first
    assert sorted(t.name.rsplit("_", 1)[0] for t in own_first) == sorted(_SEARCH_THREADS)
    assert sorted(t.name.rsplit("_", 1)[0] for t in own_second) == sorted(_SEARCH_THREADS)
    first.close()
    assert not any(t.is_alive() for t in own_first)
    assert all(t.is_alive() for t in own_second)
    assert second.search(ALICE, "w1 w2 w3")  # its threads still serve it
    second.close()
    assert not any(t.is_alive() for t in own_second)
    assert set(_search_threads()) <= before
