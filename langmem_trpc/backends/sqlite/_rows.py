"""Row-level writes shared by every write path: FTS upkeep, history, soft delete.

Every function runs inside the caller's write transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...service.documents import fts_document, keys_of, topics_document
from ...service.language import Language
from ...service.steps import Keep
from ...types import Entry, Memory, UserKey
from . import _sql as sql
from ._keyword import scope_prefix, scoped
from ._vectors import NewRow

Row = tuple[Any, ...]
"""A fetched row; the names below index the columns `_sql` selects."""
TEXT, TOPICS = 2, 3
DELETED, KEYED = sql.N_ENTRY_COLUMNS, sql.N_ENTRY_COLUMNS + 1
CONTENT_DOC, TOPIC_DOC = sql.N_ENTRY_COLUMNS, sql.N_ENTRY_COLUMNS + 1
FOUND_CONTENT_DOC = sql.N_ENTRY_COLUMNS + 2
"""content_doc in `SELECT_BY_FINGERPRINT` (after deleted_at and keyed)."""


@dataclass(slots=True)
class Prepared:
    """A validated memory with everything its row needs, computed outside the transaction.
    Nothing changes one once built (not frozen: a frozen one took twice as long to build,
    once per inserted row)."""

    memory: Memory
    fingerprint: bytes
    columns: tuple[Any, ...]
    """topics, kind, event_time, participants, location, metadata as stored."""
    content_doc: str
    topic_doc: str
    content_len: int
    topic_len: int
    """Tokens of each document."""

    @classmethod
    def of(cls, memory: Memory, fp: str, language: Language) -> Prepared:
        content_doc, topic_doc = documents(memory, language)
        return cls(
            memory,
            bytes.fromhex(fp),
            sql.memory_params(memory),
            content_doc,
            topic_doc,
            _token_count(content_doc),
            _token_count(topic_doc),
        )


def documents(memory: Memory, language: Language) -> tuple[str, str]:
    """A memory's keyword documents: its text's and its keys' (`keys_of`), which are
    empty for a memory with no topics, participants or location (most batch rows)."""
    content_doc = fts_document(memory.text, language)
    if not memory.topics and not memory.participants and memory.location is None:
        return content_doc, ""
    return content_doc, topics_document(keys_of(memory), language)


def _token_count(document: str) -> int:
    """Tokens of a stored document (single-space separated, see `fts_document`)."""
    return document.count(" ") + 1 if document else 0


def count_inserted(
    conn: sqlite3.Connection,
    user: UserKey,
    entries: Sequence[Entry],
    content_len: int,
    topic_len: int,
) -> None:
    """Account for live rows (their `entries`) just inserted into `memories`: every
    insert path calls this."""
    u = (user.app_name, user.user_id)
    superseded = sum(e.superseded_by is not None for e in entries)
    ending = sum(e.valid_to is not None for e in entries)
    rows = len(entries)
    conn.execute(sql.STATE_ROW, u)
    conn.execute(sql.COUNT_INSERTED, (rows, rows, content_len, topic_len, superseded, ending, *u))


def validity_params(entry: Entry) -> tuple[int, int | None, str | None]:
    """valid_from, valid_to, superseded_by of an entry, as stored."""
    valid_from = sql.to_us(entry.valid_from)
    assert valid_from is not None
    return valid_from, sql.to_us(entry.valid_to), entry.superseded_by


def new_row(
    rid: int, p: Prepared, blob: bytes | None, validity: tuple[int, int | None, str | None]
) -> NewRow:
    """What the caches learn of an inserted row (`validity`: its `validity_params`)."""
    valid_from, valid_to, superseded_by = validity
    return (rid, p.columns[1], p.columns[2], blob, valid_from, valid_to, superseded_by is not None)


def user_state(conn: sqlite3.Connection, user: UserKey) -> Row | None:
    row: Row | None = conn.execute(sql.SELECT_STATE, (user.app_name, user.user_id)).fetchone()
    return row


def to_entry(row: Row, user: UserKey) -> Entry:
    return sql.row_to_entry(row, user.app_name, user.user_id)


def index_row(conn: sqlite3.Connection, user: UserKey, rid: int, content: str, topics: str) -> None:
    prefix = scope_prefix(user)
    conn.execute(sql.FTS_INSERT, (rid, scoped(prefix, content), scoped(prefix, topics)))


def unindex_row(conn: sqlite3.Connection, user: UserKey, rid: int) -> None:
    """Drop a live row from FTS; call before its documents change (no-op if deleted)."""
    prefix = scope_prefix(user)
    conn.execute(sql.FTS_UNINDEX, (prefix, prefix, rid))


def write_content(
    conn: sqlite3.Connection,
    user: UserKey,
    rid: int,
    p: Prepared,
    blob: bytes | None | Keep,
    at: int,
) -> None:
    """Replace a row's content (reviving it if deleted) and its FTS document."""
    unindex_row(conn, user, rid)
    docs = (p.content_doc, p.topic_doc, p.content_len, p.topic_len)
    if isinstance(blob, Keep):
        conn.execute(
            sql.UPDATE_CONTENT_KEEP_EMBEDDING,
            (p.memory.text, p.fingerprint, *p.columns, *docs, at, rid),
        )
    else:
        conn.execute(
            sql.UPDATE_CONTENT,
            (p.memory.text, p.fingerprint, *p.columns, blob, *docs, at, rid),
        )
    index_row(conn, user, rid, p.content_doc, p.topic_doc)


def insert_new(
    conn: sqlite3.Connection,
    user: UserKey,
    pending: Sequence[tuple[Prepared, bytes | None, Entry, bool]],
    cached: bool = True,
) -> tuple[int, list[NewRow]]:
    """New rows (prepared, blob, entry, keyed) and their FTS documents, one executemany
    for each table; returns the first row's rid (the others follow it) and each row for
    the vector cache (none unless `cached`: the user's vectors are cached, so the rows
    are appended to them after the commit)."""
    if not pending:
        return 0, []
    u = (user.app_name, user.user_id)
    prefix = scope_prefix(user)
    rid = int(conn.execute(sql.NEXT_RID).fetchone()[0])
    seq = int(conn.execute(sql.NEXT_WRITE_SEQ, u).fetchone()[0])
    memories, index, new_rows = [], [], []
    content_total = topic_total = 0
    for offset, (p, blob, entry, keyed) in enumerate(pending):
        content_total += p.content_len
        topic_total += p.topic_len
        validity = validity_params(entry)
        memories.append(_memory_row(rid + offset, u, p, blob, entry, keyed, validity, seq + offset))
        index.append((rid + offset, scoped(prefix, p.content_doc), scoped(prefix, p.topic_doc)))
        if cached:
            new_rows.append(new_row(rid + offset, p, blob, validity))
    conn.executemany(sql.INSERT_MEMORY_WITH_RID, memories)
    count_inserted(conn, user, [entry for _, _, entry, _ in pending], content_total, topic_total)
    conn.executemany(sql.FTS_INSERT, index)
    return rid, new_rows


def _memory_row(
    rid: int,
    u: tuple[str, str],
    p: Prepared,
    blob: bytes | None,
    entry: Entry,
    keyed: bool,
    validity: tuple[int, int | None, str | None],
    seq: int,
) -> Row:
    """`INSERT_MEMORY_WITH_RID`'s parameters. A new entry's timestamps are most often
    one `Now` (`validity[0]` is its valid_from): converted once."""
    at = entry.created_at
    created = validity[0] if entry.valid_from is at else sql.to_us(at)
    updated = created if entry.updated_at is at else sql.to_us(entry.updated_at)
    return (
        rid,
        *u,
        entry.id,
        p.memory.text,
        p.fingerprint,
        keyed,
        *p.columns,
        blob,
        p.content_doc,
        p.topic_doc,
        p.content_len,
        p.topic_len,
        created,
        updated,
        *validity,
        seq,
    )
