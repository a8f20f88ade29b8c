"""Participants and location are searchable in databases written before they were
(issue 29): the SQLite and PostgreSQL migrations rebuild the keys documents of the
rows holding either, and the index and the user's statistics follow."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import psycopg
import pytest

from langmem_trpc.backends.sqlite import MIGRATIONS, SQLiteMemoryService
from langmem_trpc.backends.sqlite._keyword import scope_prefix, scoped
from langmem_trpc.service.documents import keys_of, topics_document
from langmem_trpc.types import Kind, Memory, UserKey

from .test_sqlite import assert_index_consistent, assert_state_consistent

ALICE = UserKey("app", "alice")
QUERIES = ("Chamonix", "Bob", "What did Alice do with Bob in Chamonix?")


def _fill(svc) -> None:
    svc.add(
        ALICE,
        "Hiked Mont Blanc",
        kind=Kind.EPISODE,
        event_time="2024-07-14",
        participants=["Bob"],
        location="Chamonix",
        topics=["outdoors"],
    )
    svc.add(ALICE, "Prefers tea over coffee")
    gone = svc.add(ALICE, "Sailed with Erin", participants=["Erin"], location="Marseille")
    svc.delete(ALICE, gone.id)


def test_sqlite_keys_migration_indexes_existing_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    svc = SQLiteMemoryService(path)
    _fill(svc)
    svc.close()
    prefix = scope_prefix(ALICE)
    conn = sqlite3.connect(path)
    conn.create_function("lm_scoped", 2, scoped)
    conn.create_function("lm_topics", 1, lambda t: topics_document(json.loads(t)))
    with conn:  # what the earlier code stored: the topics alone in the keys document
        conn.execute("INSERT INTO memories_fts (memories_fts) VALUES ('delete-all')")
        conn.execute("UPDATE memories SET topic_doc = lm_topics(topics)")
        conn.execute(
            "UPDATE memories SET topic_len = CASE WHEN topic_doc = '' THEN 0 ELSE "
            "length(topic_doc) - length(replace(topic_doc, ' ', '')) + 1 END"
        )
        conn.execute(
            "INSERT INTO memories_fts (rowid, content, topics) SELECT rid, "
            "lm_scoped(?, content_doc), lm_scoped(?, topic_doc) FROM memories "
            "WHERE deleted_at IS NULL",
            (prefix, prefix),
        )
    conn.close()
    (keys,) = [m for m in MIGRATIONS if "lm_keys_doc" in "".join(m)]
    svc = SQLiteMemoryService(path)  # the keys migration again (later ones cannot rerun)
    svc._db.write(lambda conn: [conn.execute(statement) for statement in keys])
    for query in QUERIES:
        assert [e.text for e in svc.search(ALICE, query)] == ["Hiked Mont Blanc"], query
    assert svc.search(ALICE, "Marseille") == []
    svc.close()
    assert_index_consistent(path)
    assert_state_consistent(path)
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT text, topics, participants, location, topic_doc FROM memories")
    for text, topics, participants, location, topic_doc in rows.fetchall():
        memory = Memory(
            text=text,
            topics=json.loads(topics),
            participants=json.loads(participants),
            location=location,
        )
        assert topic_doc == topics_document(keys_of(memory)), text
    conn.close()


@pytest.mark.postgres
def test_postgres_keys_migration_retokenises_rows_with_fields(pg_url: str) -> None:
    from langmem_trpc.backends.postgres import PostgresMemoryService, _sql

    svc = PostgresMemoryService(pg_url)
    svc.setup()
    _fill(svc)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(  # what the earlier code stored: topics alone in the keys document
            "UPDATE langmem_memories SET topic_terms = '{outdoor}', topic_doc = 'outdoor', "
            "topic_len = 1 WHERE text = 'Hiked Mont Blanc'"
        )
        conn.execute(
            "UPDATE langmem_memories SET topic_terms = '{}', topic_doc = '', topic_len = 0 "
            "WHERE text = 'Sailed with Erin'"
        )
        conn.execute(
            "DELETE FROM langmem_migrations WHERE scope = 'core' AND version = %s",
            (_sql.KEYS_MIGRATION,),
        )
    svc.close()
    svc = PostgresMemoryService(pg_url)
    assert svc.search(ALICE, "Chamonix") == []  # before setup: the old documents
    svc.setup()
    for query in QUERIES:
        assert [e.text for e in svc.search(ALICE, query)] == ["Hiked Mont Blanc"], query
    with psycopg.connect(pg_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT text, topics, participants, location, topic_doc FROM langmem_memories"
        ).fetchall()
        df = dict(conn.execute("SELECT term, df FROM langmem_user_terms WHERE df > 0").fetchall())
    for text, topics, participants, location, topic_doc in rows:
        memory = Memory(text=text, topics=topics, participants=participants, location=location)
        assert topic_doc == topics_document(keys_of(memory)), text
    assert df.get("chamonix") == 1 and "marseill" not in df  # the deleted row counts for none
    svc.close()
