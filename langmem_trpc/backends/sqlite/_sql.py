"""SQL text, the append-only `MIGRATIONS` list and row converters. No I/O.

Times are stored as integer microseconds since the Unix epoch (UTC), so they
round-trip exactly and sort as integers. Lists and dicts are JSON text;
embeddings are float32 blobs, L2-normalised.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from ...errors import InvalidMemoryError
from ...service import rules
from ...service.rules import checked_model
from ...types import Entry, HistoryEvent, Kind, Memory, Operation, Source

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)

#: Position in the list is the schema version. Append only: never edit a
#: shipped entry (a test pins their hashes); fix forward with a new one.
MIGRATIONS: list[tuple[str, ...]] = [
    (
        """CREATE TABLE memories (
            rid INTEGER PRIMARY KEY,
            app_name TEXT NOT NULL,
            user_id TEXT NOT NULL,
            id TEXT NOT NULL,
            text TEXT NOT NULL,
            fingerprint BLOB NOT NULL,
            keyed INTEGER NOT NULL DEFAULT 0,
            topics TEXT NOT NULL DEFAULT '[]',
            kind TEXT NOT NULL,
            event_time INTEGER,
            participants TEXT NOT NULL DEFAULT '[]',
            location TEXT,
            metadata TEXT NOT NULL DEFAULT '{}',
            embedding BLOB,
            content_doc TEXT NOT NULL DEFAULT '',
            topic_doc TEXT NOT NULL DEFAULT '',
            content_len INTEGER NOT NULL DEFAULT 0,
            topic_len INTEGER NOT NULL DEFAULT 0,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            deleted_at INTEGER,
            UNIQUE (app_name, user_id, id)
        )""",
        """CREATE UNIQUE INDEX memories_live_fingerprint
            ON memories (app_name, user_id, fingerprint) WHERE deleted_at IS NULL""",
        "CREATE INDEX memories_fingerprint ON memories (app_name, user_id, fingerprint)",
        "CREATE INDEX memories_updated ON memories (app_name, user_id, updated_at)",
        """CREATE TABLE history (
            seq INTEGER PRIMARY KEY,
            app_name TEXT NOT NULL,
            user_id TEXT NOT NULL,
            memory_id TEXT NOT NULL,
            operation TEXT NOT NULL,
            text_before TEXT,
            text_after TEXT,
            at INTEGER NOT NULL,
            source TEXT
        )""",
        "CREATE INDEX history_memory ON history (app_name, user_id, memory_id, seq)",
        """CREATE TABLE cursors (
            app_name TEXT NOT NULL,
            user_id TEXT NOT NULL,
            thread_id TEXT NOT NULL,
            last_message_id TEXT,
            last_message_digest TEXT,
            message_count INTEGER NOT NULL DEFAULT 0,
            last_extracted_at INTEGER,
            updated_at INTEGER NOT NULL,
            PRIMARY KEY (app_name, user_id, thread_id)
        ) WITHOUT ROWID""",
        """CREATE TABLE user_state (
            app_name TEXT NOT NULL,
            user_id TEXT NOT NULL,
            generation TEXT NOT NULL,
            version INTEGER NOT NULL DEFAULT 0,
            n_live INTEGER NOT NULL DEFAULT 0,
            content_len INTEGER NOT NULL DEFAULT 0,
            topic_len INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (app_name, user_id)
        ) WITHOUT ROWID""",
        """CREATE TRIGGER memories_after_insert AFTER INSERT ON memories BEGIN
            INSERT OR IGNORE INTO user_state (app_name, user_id, generation)
                VALUES (new.app_name, new.user_id, lower(hex(randomblob(8))));
            UPDATE user_state SET
                version = version + 1,
                n_live = n_live + (new.deleted_at IS NULL),
                content_len = content_len
                    + CASE WHEN new.deleted_at IS NULL THEN new.content_len ELSE 0 END,
                topic_len = topic_len
                    + CASE WHEN new.deleted_at IS NULL THEN new.topic_len ELSE 0 END
            WHERE app_name = new.app_name AND user_id = new.user_id;
        END""",
        """CREATE TRIGGER memories_after_update AFTER UPDATE ON memories BEGIN
            UPDATE user_state SET
                version = version + 1,
                n_live = n_live + (new.deleted_at IS NULL) - (old.deleted_at IS NULL),
                content_len = content_len
                    + CASE WHEN new.deleted_at IS NULL THEN new.content_len ELSE 0 END
                    - CASE WHEN old.deleted_at IS NULL THEN old.content_len ELSE 0 END,
                topic_len = topic_len
                    + CASE WHEN new.deleted_at IS NULL THEN new.topic_len ELSE 0 END
                    - CASE WHEN old.deleted_at IS NULL THEN old.topic_len ELSE 0 END
            WHERE app_name = new.app_name AND user_id = new.user_id;
        END""",
        """CREATE TRIGGER memories_after_delete AFTER DELETE ON memories BEGIN
            UPDATE user_state SET
                version = version + 1,
                n_live = n_live - (old.deleted_at IS NULL),
                content_len = content_len
                    - CASE WHEN old.deleted_at IS NULL THEN old.content_len ELSE 0 END,
                topic_len = topic_len
                    - CASE WHEN old.deleted_at IS NULL THEN old.topic_len ELSE 0 END
            WHERE app_name = old.app_name AND user_id = old.user_id;
        END""",
        # The documents (content_doc, topic_doc) are the package tokenizer's
        # output joined by spaces; FTS indexes them with each token behind the
        # user's prefix (lm_scoped), contentless. The ascii tokenizer only splits
        # on ASCII non-alphanumerics, so FTS sees exactly those tokens and every
        # term (and its document count) belongs to one (app_name, user_id).
        """CREATE VIRTUAL TABLE memories_fts USING fts5(
            content, topics, content = '', tokenize = 'ascii'
        )""",
    ),
    # 2: user_state counts inserted rows in the writing code, once per statement
    # (`_rows.count_inserted`, `COUNT_INSERTED`): the per-row insert trigger was
    # 40% of a batch row's insert time. Update and delete keep their triggers.
    ("DROP TRIGGER memories_after_insert",),
    # 3: the FTS prefix of a pair with U+001F in app_name or user_id was ambiguous
    # (("a\x1fb", "c") and ("a", "b\x1fc") shared one); such users' live rows move
    # from the old prefix (lm_scope_v1) to the injective one (lm_scope,
    # `_keyword.scope_prefix_of`). Every other pair keeps its prefix.
    (
        """INSERT INTO memories_fts (memories_fts, rowid, content, topics)
            SELECT 'delete', rid, lm_scoped(lm_scope_v1(app_name, user_id), content_doc),
                lm_scoped(lm_scope_v1(app_name, user_id), topic_doc)
            FROM memories WHERE deleted_at IS NULL
                AND (instr(app_name, char(31)) > 0 OR instr(user_id, char(31)) > 0)""",
        """INSERT INTO memories_fts (rowid, content, topics)
            SELECT rid, lm_scoped(lm_scope(app_name, user_id), content_doc),
                lm_scoped(lm_scope(app_name, user_id), topic_doc)
            FROM memories WHERE deleted_at IS NULL
                AND (instr(app_name, char(31)) > 0 OR instr(user_id, char(31)) > 0)""",
    ),
    # 4: the "evict" capacity policy takes the least recently written memory by
    # write_seq (per user: the user's highest + 1 on every insert and content
    # write), not by updated_at, so a wall clock stepping backwards (another
    # process, a restart) cannot make the newest memory look oldest. Existing rows
    # are numbered in their old order; a temporary table keeps this portable
    # (no UPDATE ... FROM, which needs SQLite 3.33).
    (
        "ALTER TABLE memories ADD COLUMN write_seq INTEGER NOT NULL DEFAULT 0",
        "CREATE TEMP TABLE lm_write_order (n INTEGER PRIMARY KEY, rid INTEGER NOT NULL UNIQUE)",
        """INSERT INTO lm_write_order (rid)
            SELECT rid FROM memories ORDER BY updated_at, created_at, id""",
        """UPDATE memories SET write_seq = (
            SELECT n FROM lm_write_order AS o WHERE o.rid = memories.rid)""",
        "DROP TABLE lm_write_order",
        "CREATE INDEX memories_write_seq ON memories (app_name, user_id, write_seq)",
    ),
    # 5: fingerprints of rows whose participants, location or explicit id could be
    # read two ways (a participant holding a comma, U+001F anywhere) are
    # recomputed in the unambiguous encoding (`service.rules.fingerprint`, through
    # lm_fingerprint), so adding their content again finds them. Every other
    # row's fingerprint is the same in both encodings and is left alone.
    (
        """UPDATE memories SET fingerprint = lm_fingerprint(
                text, kind, event_time, participants, location, CASE WHEN keyed THEN id END)
            WHERE participants LIKE '%,%' OR instr(participants, char(31)) > 0
                OR instr(coalesce(location, ''), char(31)) > 0
                OR (keyed AND instr(id, char(31)) > 0)""",
    ),
    # (cursor) extraction cursors record the covered messages' keys; failed
    # attempts per thread; dead letters (backends/sqlite/_claims.py). Claims
    # are file locks, not rows (backends/sqlite/_locks.py).
    (
        "ALTER TABLE cursors ADD COLUMN message_keys BLOB",
        "ALTER TABLE cursors ADD COLUMN retired_keys BLOB",
        "ALTER TABLE cursors ADD COLUMN pending_retries INTEGER NOT NULL DEFAULT 0",
        """CREATE TABLE thread_attempts (
            app_name TEXT NOT NULL,
            user_id TEXT NOT NULL,
            thread_id TEXT NOT NULL,
            batch TEXT,
            attempts INTEGER NOT NULL DEFAULT 0,
            last_error TEXT,
            PRIMARY KEY (app_name, user_id, thread_id)
        ) WITHOUT ROWID""",
        """CREATE TABLE dead_letters (
            id TEXT PRIMARY KEY,
            app_name TEXT NOT NULL,
            user_id TEXT NOT NULL,
            thread_id TEXT NOT NULL,
            status TEXT NOT NULL,
            error TEXT NOT NULL,
            attempts INTEGER NOT NULL,
            message_ids TEXT NOT NULL,
            messages TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL
        )""",
        "CREATE INDEX dead_letters_thread ON dead_letters (app_name, user_id, thread_id, status)",
        "CREATE INDEX dead_letters_created ON dead_letters (created_at, id)",
    ),
    # 7: expires_at (MemoryStore's TTL; read and written by _expiry.py only).
    (
        "ALTER TABLE memories ADD COLUMN expires_at INTEGER",
        "CREATE INDEX memories_expiring ON memories (app_name, user_id, expires_at)"
        " WHERE expires_at IS NOT NULL AND deleted_at IS NULL",
    ),
    # Stemmed keyword documents: the tokenizer now Snowball-stems Latin words, so
    # every stored document, its token counts and the FTS index are rebuilt with
    # the package tokenizer (the `lm_*` functions `_keyword.register_functions`
    # gives each connection). The update trigger keeps user_state's length sums
    # and bumps every user's version, so no cache outlives the rebuild.
    (
        "INSERT INTO memories_fts (memories_fts) VALUES ('delete-all')",
        """UPDATE memories SET content_doc = lm_content_doc(text),
            topic_doc = lm_topic_doc(topics)""",
        """UPDATE memories SET content_len = lm_doc_len(content_doc),
            topic_len = lm_doc_len(topic_doc)""",
        """INSERT INTO memories_fts (rowid, content, topics)
            SELECT rid, lm_scoped(lm_scope(app_name, user_id), content_doc),
                lm_scoped(lm_scope(app_name, user_id), topic_doc)
            FROM memories WHERE deleted_at IS NULL""",
    ),
    # The tokenizer's language, which every stored document depends on. A database
    # that existed before has English documents; `Database` records the service's
    # language instead when it creates the file, and refuses another one later.
    (
        """CREATE TABLE langmem_settings (
            key TEXT PRIMARY KEY,
            value TEXT NOT NULL
        )""",
        "INSERT INTO langmem_settings (key, value) VALUES ('language', 'english')",
    ),
    # Participants and location are searchable: they join the topics in the keys
    # document (topic_doc, `_documents.memory_keys`). Rows holding either get their
    # keys document, its length and (live rows) their FTS entry rebuilt; the update
    # trigger keeps user_state's sums and bumps the users' versions (no stale cache).
    (
        """INSERT INTO memories_fts (memories_fts, rowid, content, topics)
            SELECT 'delete', rid, lm_scoped(lm_scope(app_name, user_id), content_doc),
                lm_scoped(lm_scope(app_name, user_id), topic_doc)
            FROM memories WHERE deleted_at IS NULL
                AND (participants <> '[]' OR location IS NOT NULL)""",
        """UPDATE memories SET topic_doc = lm_keys_doc(topics, participants, location)
            WHERE participants <> '[]' OR location IS NOT NULL""",
        """UPDATE memories SET topic_len = lm_doc_len(topic_doc)
            WHERE participants <> '[]' OR location IS NOT NULL""",
        """INSERT INTO memories_fts (rowid, content, topics)
            SELECT rid, lm_scoped(lm_scope(app_name, user_id), content_doc),
                lm_scoped(lm_scope(app_name, user_id), topic_doc)
            FROM memories WHERE deleted_at IS NULL
                AND (participants <> '[]' OR location IS NOT NULL)""",
    ),
    # reembed (#27): the shadow vectors of a re-embed in progress, each with the text it
    # was embedded from (`_reembed.py`); empty outside a re-embed.
    (
        """CREATE TABLE IF NOT EXISTS reembed_vectors (
            rid INTEGER PRIMARY KEY,
            text TEXT NOT NULL,
            embedding BLOB NOT NULL
        )""",
    ),
    # Validity (#26, `service/validity.py`): business time and supersede links. Existing
    # rows become current from their event time, else their creation. The live
    # fingerprint is unique among current-in-index rows only (a superseded version keeps
    # its fingerprint); user_state counts the live superseded rows (`count` leaves them
    # out) and the live rows with an end (a search filters validity only when a user
    # has either). A partial index serves FindPredecessor; the CURRENT read filters
    # the user's rows in `memories_updated` order (no index of its own to keep up on
    # every insert: superseded rows are a few among many).
    (
        "ALTER TABLE memories ADD COLUMN valid_from INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE memories ADD COLUMN valid_to INTEGER",
        "ALTER TABLE memories ADD COLUMN superseded_by TEXT",
        "ALTER TABLE user_state ADD COLUMN n_superseded INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE user_state ADD COLUMN n_ending INTEGER NOT NULL DEFAULT 0",
        "UPDATE memories SET valid_from = coalesce(event_time, created_at)",
        "DROP INDEX memories_live_fingerprint",
        """CREATE UNIQUE INDEX memories_live_fingerprint
            ON memories (app_name, user_id, fingerprint)
            WHERE deleted_at IS NULL AND superseded_by IS NULL""",
        """CREATE INDEX memories_predecessor ON memories (app_name, user_id, superseded_by)
            WHERE superseded_by IS NOT NULL""",
        "DROP TRIGGER memories_after_update",
        """CREATE TRIGGER memories_after_update AFTER UPDATE ON memories BEGIN
            UPDATE user_state SET
                version = version + 1,
                n_live = n_live + (new.deleted_at IS NULL) - (old.deleted_at IS NULL),
                n_superseded = n_superseded
                    + (new.deleted_at IS NULL AND new.superseded_by IS NOT NULL)
                    - (old.deleted_at IS NULL AND old.superseded_by IS NOT NULL),
                n_ending = n_ending
                    + (new.deleted_at IS NULL AND new.valid_to IS NOT NULL)
                    - (old.deleted_at IS NULL AND old.valid_to IS NOT NULL),
                content_len = content_len
                    + CASE WHEN new.deleted_at IS NULL THEN new.content_len ELSE 0 END
                    - CASE WHEN old.deleted_at IS NULL THEN old.content_len ELSE 0 END,
                topic_len = topic_len
                    + CASE WHEN new.deleted_at IS NULL THEN new.topic_len ELSE 0 END
                    - CASE WHEN old.deleted_at IS NULL THEN old.topic_len ELSE 0 END
            WHERE app_name = new.app_name AND user_id = new.user_id;
        END""",
        "DROP TRIGGER memories_after_delete",
        """CREATE TRIGGER memories_after_delete AFTER DELETE ON memories BEGIN
            UPDATE user_state SET
                version = version + 1,
                n_live = n_live - (old.deleted_at IS NULL),
                n_superseded = n_superseded
                    - (old.deleted_at IS NULL AND old.superseded_by IS NOT NULL),
                n_ending = n_ending - (old.deleted_at IS NULL AND old.valid_to IS NOT NULL),
                content_len = content_len
                    - CASE WHEN old.deleted_at IS NULL THEN old.content_len ELSE 0 END,
                topic_len = topic_len
                    - CASE WHEN old.deleted_at IS NULL THEN old.topic_len ELSE 0 END
            WHERE app_name = old.app_name AND user_id = old.user_id;
        END""",
    ),
]

CREATE_MIGRATIONS_TABLE = """CREATE TABLE IF NOT EXISTS langmem_migrations (
    version INTEGER PRIMARY KEY,
    applied_at INTEGER NOT NULL
)"""

# -- memories ---------------------------------------------------------------

ENTRY_COLUMNS = (
    "rid, id, text, topics, kind, event_time, participants, location, metadata,"
    " created_at, updated_at, expires_at, valid_from, valid_to, superseded_by"
)
"""Columns `row_to_entry` reads, in order (app_name and user_id come from the caller)."""
N_ENTRY_COLUMNS = 15

USER = "app_name = ? AND user_id = ?"
LIVE = USER + " AND deleted_at IS NULL"

SELECT_BY_ID = f"SELECT {ENTRY_COLUMNS}, deleted_at, keyed FROM memories WHERE {USER} AND id = ?"
"""Entry columns, then deleted_at (15) and keyed (16)."""
SELECT_LIVE_BY_FINGERPRINT = (
    f"SELECT {ENTRY_COLUMNS}, content_doc, keyed FROM memories WHERE {LIVE}"
    " AND superseded_by IS NULL AND fingerprint = ?"
)
"""The current-in-index row (superseded versions are never found): entry columns, then
content_doc (15) and keyed (16)."""
SELECT_BY_FINGERPRINT = (
    f"SELECT {ENTRY_COLUMNS}, deleted_at, keyed, content_doc FROM memories"
    f" WHERE {USER} AND fingerprint = ? AND superseded_by IS NULL"
    " ORDER BY deleted_at IS NOT NULL, rid LIMIT 1"
)
"""The live row, else the first deleted one, superseded versions left out: entry
columns, then deleted_at (15), keyed (16) and content_doc (17)."""
SELECT_PREDECESSOR = (
    f"SELECT {ENTRY_COLUMNS}, deleted_at, keyed FROM memories WHERE {LIVE}"
    " AND superseded_by = ? AND id NOT IN (SELECT value FROM json_each(?))"
    " ORDER BY updated_at DESC, rid DESC LIMIT 1"
)
"""The live row a memory id superseded whose id is not in the JSON array given, the most
recently updated where restores left several (`memories_predecessor`): columns as
`SELECT_BY_ID`."""
SET_VALIDITY = "UPDATE memories SET valid_to = ?, superseded_by = ?, updated_at = ? WHERE rid = ?"
SELECT_CONTENT_DOC = "SELECT content_doc FROM memories WHERE rid = ?"
SELECT_OLDEST_LIVE = f"SELECT rid, id, text FROM memories WHERE {LIVE} ORDER BY write_seq LIMIT 1"
SELECT_READ = f"SELECT {ENTRY_COLUMNS} FROM memories WHERE {LIVE}"
"""Followed by the view's conditions (`_validity.conditions`), then `READ_ORDER`."""
READ_ORDER = " ORDER BY updated_at DESC, created_at DESC, id DESC"
SELECT_DELETED = (
    f"SELECT {ENTRY_COLUMNS} FROM memories WHERE {USER} AND deleted_at IS NOT NULL"
    " ORDER BY deleted_at DESC, id DESC"
)
SELECT_LIVE_TEXT = f"SELECT rid, id, text FROM memories WHERE {LIVE} ORDER BY rid"
SELECT_BY_RIDS = (
    f"SELECT {ENTRY_COLUMNS} FROM memories"
    " WHERE +app_name = ? AND +user_id = ? AND deleted_at IS NULL AND rid IN "
)
"""Followed by a `(?, ?, ...)` list."""
SELECT_SCAN = f"SELECT {ENTRY_COLUMNS} FROM memories WHERE {LIVE}"
"""Followed by optional kind/time conditions (the phrase-fallback scan)."""

_WRITE_SEQ = """(SELECT coalesce(max(s.write_seq), 0) + 1 FROM memories AS s
        WHERE s.app_name = memories.app_name AND s.user_id = memories.user_id)"""
"""A rewritten row's new write_seq: its user's highest + 1 (migration 4)."""
_NEXT_SEQ = """(SELECT coalesce(max(write_seq), 0) + 1 FROM memories
    WHERE app_name = ?{app} AND user_id = ?{user})"""
"""The user's next write_seq (migration 4); `?N` names the app_name and user_id parameters."""
INSERT_MEMORY = f"""INSERT INTO memories (
    app_name, user_id, id, text, fingerprint, keyed, topics, kind, event_time, participants,
    location, metadata, embedding, content_doc, topic_doc, content_len, topic_len, created_at,
    updated_at, valid_from, valid_to, superseded_by, write_seq
) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,
    {_NEXT_SEQ.format(app=1, user=2)})"""
INSERT_MEMORY_WITH_RID = """INSERT INTO memories (
    rid, app_name, user_id, id, text, fingerprint, keyed, topics, kind, event_time, participants,
    location, metadata, embedding, content_doc, topic_doc, content_len, topic_len, created_at,
    updated_at, valid_from, valid_to, superseded_by, write_seq
) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"""
"""The batch path assigns row ids itself (it holds the write lock) to use executemany."""
NEXT_RID = "SELECT coalesce(max(rid), 0) + 1 FROM memories"
NEXT_WRITE_SEQ = "SELECT " + _NEXT_SEQ.format(app=1, user=2)
"""Params: app_name, user_id; the batch path numbers its rows from it."""
STATE_ROW = """INSERT OR IGNORE INTO user_state (app_name, user_id, generation)
    VALUES (?, ?, lower(hex(randomblob(8))))"""
COUNT_INSERTED = """UPDATE user_state SET
    version = version + ?, n_live = n_live + ?, content_len = content_len + ?,
    topic_len = topic_len + ?, n_superseded = n_superseded + ?, n_ending = n_ending + ?
WHERE app_name = ? AND user_id = ?"""
"""After inserting live rows (schema migration 2 dropped the insert trigger).
Params: rows, rows, content_len sum, topic_len sum, superseded rows, rows with a
valid_to, app_name, user_id."""
KNOWN_FINGERPRINTS = f"SELECT fingerprint FROM memories WHERE {USER} AND fingerprint IN "
"""Followed by a `(?, ?, ...)` list."""
UPDATE_CONTENT = f"""UPDATE memories SET
    text = ?, fingerprint = ?, topics = ?, kind = ?, event_time = ?, participants = ?,
    location = ?, metadata = ?, embedding = ?, content_doc = ?, topic_doc = ?, content_len = ?,
    topic_len = ?, updated_at = ?, deleted_at = NULL, write_seq = {_WRITE_SEQ}
WHERE rid = ?"""
UPDATE_CONTENT_KEEP_EMBEDDING = f"""UPDATE memories SET
    text = ?, fingerprint = ?, topics = ?, kind = ?, event_time = ?, participants = ?,
    location = ?, metadata = ?, content_doc = ?, topic_doc = ?, content_len = ?, topic_len = ?,
    updated_at = ?, write_seq = {_WRITE_SEQ}
WHERE rid = ?"""
UPDATE_TOPICS = f"""UPDATE memories SET topics = ?, topic_doc = ?, topic_len = ?, updated_at = ?,
    write_seq = {_WRITE_SEQ}
WHERE rid = ?"""
UPDATE_EMBEDDING = (
    "UPDATE memories SET embedding = ? WHERE rid = ? AND text = ? AND participants = ?"
)
SOFT_DELETE = "UPDATE memories SET deleted_at = ? WHERE rid = ?"
SOFT_DELETE_ALL = f"UPDATE memories SET deleted_at = ? WHERE {LIVE}"
SELECT_RID_BY_ID = f"SELECT rid, deleted_at FROM memories WHERE {USER} AND id = ?"
DELETE_BY_RID = "DELETE FROM memories WHERE rid = ?"
DELETE_USER = f"DELETE FROM memories WHERE {USER}"
COUNT_USER_ROWS = f"SELECT count(*) FROM memories WHERE {USER}"

SELECT_VECTORS = (
    "SELECT rid, kind, event_time, embedding, valid_from, valid_to, superseded_by IS NOT NULL"
    f" FROM memories WHERE {LIVE}"
    " AND embedding IS NOT NULL AND length(embedding) = ? ORDER BY rid"
)
SELECT_DOCUMENTS = (
    "SELECT rid, kind, event_time, content_doc, topic_doc, valid_from, valid_to,"
    f" superseded_by IS NOT NULL FROM memories WHERE {LIVE} ORDER BY rid"
)
"""What a user's in-memory keyword index is built from (`_postings.KeywordIndex`)."""
COUNT_VECTORS = (
    f"SELECT count(*) FROM memories WHERE {LIVE}"
    " AND embedding IS NOT NULL AND length(embedding) = ?"
)
SELECT_MISSING_VECTORS = (
    f"SELECT rid, text, participants FROM memories WHERE {LIVE}"
    " AND (embedding IS NULL OR length(embedding) != ?) ORDER BY rid LIMIT ?"
)

# -- full-text index ------------------------------------------------------------

FTS_INSERT = "INSERT INTO memories_fts (rowid, content, topics) VALUES (?, ?, ?)"
_FTS_DELETE_COMMAND = (
    "INSERT INTO memories_fts (memories_fts, rowid, content, topics)"
    " SELECT 'delete', rid, lm_scoped(?, content_doc), lm_scoped(?, topic_doc) FROM memories"
)
FTS_UNINDEX = _FTS_DELETE_COMMAND + " WHERE rid = ? AND deleted_at IS NULL"
"""Remove a row from the index; a no-op for deleted rows (they are not indexed).
Params: prefix, prefix, rid. Must run before the row's documents change."""
FTS_UNINDEX_USER = _FTS_DELETE_COMMAND + f" WHERE {LIVE}"
"""Params: prefix, prefix, app_name, user_id."""
FTS_COUNT = "SELECT count(*) FROM memories_fts WHERE memories_fts MATCH ?"
FTS_RANK = "SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?"
"""Best BM25 first, then `FTS_ORDER`; used when no kind or time filter applies."""
FTS_RANK_FILTERED = (
    "SELECT f.rowid FROM memories_fts AS f CROSS JOIN memories AS m ON m.rid = f.rowid"
    " WHERE memories_fts MATCH ? AND m.deleted_at IS NULL"
)
"""Followed by kind/time conditions on `m.`, then `FTS_ORDER`."""
FTS_ORDER = " ORDER BY bm25(memories_fts, 1.0, 0.65) LIMIT ?"
SELECT_CANDIDATES = (
    f"SELECT {ENTRY_COLUMNS}, content_doc, topic_doc FROM memories"
    " WHERE +app_name = ? AND +user_id = ? AND deleted_at IS NULL AND rid IN "
)
"""Rows and FTS documents of ranked candidates; followed by a `(?, ?, ...)` list."""

# -- per-user state, history, cursors ---------------------------------------------

SELECT_STATE = (
    "SELECT generation, version, n_live, content_len, topic_len, n_superseded, n_ending"
    f" FROM user_state WHERE {USER}"
)
"""n_live counts every live row (capacity), n_superseded the superseded ones among them
(`count` leaves them out), n_ending those with a `valid_to`."""
SELECT_USERS = "SELECT app_name, user_id FROM user_state WHERE n_live - n_superseded > 0"
DELETE_STATE = f"DELETE FROM user_state WHERE {USER}"

INSERT_HISTORY = """INSERT INTO history (
    app_name, user_id, memory_id, operation, text_before, text_after, at, source
) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"""
HISTORY_OF_INSERTED = """INSERT INTO history (
    app_name, user_id, memory_id, operation, text_before, text_after, at, source
) SELECT app_name, user_id, id, 'add', NULL, text, created_at, ?
    FROM memories WHERE rid BETWEEN ? AND ? ORDER BY rid"""
"""The ADD events of rows just inserted with consecutive rids, read from the rows in
one statement (params: source JSON, first rid, last rid)."""
SELECT_HISTORY = (
    "SELECT memory_id, operation, text_before, text_after, at, source FROM history"
    f" WHERE {USER} AND memory_id = ? ORDER BY seq"
)
DELETE_HISTORY = f"DELETE FROM history WHERE {USER} AND memory_id = ?"
DELETE_USER_HISTORY = f"DELETE FROM history WHERE {USER}"

DELETE_USER_CURSORS = f"DELETE FROM cursors WHERE {USER}"


# -- converters -------------------------------------------------------------------


def stored_fingerprint(
    text: str,
    kind: str,
    event_time: int | None,
    participants: str,
    location: str | None,
    explicit_id: str | None,
) -> bytes:
    """SQL `lm_fingerprint` (migration 5): the fingerprint of a row's columns."""
    fp = rules.stored_fingerprint(
        text, kind, from_us(event_time), _json(participants), location, explicit_id
    )
    return bytes.fromhex(fp)


def to_us(value: datetime | None) -> int | None:
    """Exact integer microseconds since the epoch (the value must be timezone-aware)."""
    if value is None:
        return None
    return (value - _EPOCH) // _MICROSECOND


def from_us(value: int | None) -> datetime | None:
    return None if value is None else from_us_required(value)


def from_us_required(value: int) -> datetime:
    return _EPOCH + timedelta(microseconds=value)


def metadata_json(metadata: dict[str, Any]) -> str:
    """JSON text of a memory's metadata, or a field-named error (nothing is written)."""
    if not metadata:
        return "{}"
    try:
        return json.dumps(metadata, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidMemoryError("metadata", f"must be JSON-serialisable ({exc})") from None


def list_json(values: Sequence[str]) -> str:
    return json.dumps(list(values), ensure_ascii=False) if values else "[]"


def source_json(source: Source | None) -> str | None:
    return None if source is None else source.model_dump_json(exclude_none=True)


def memory_params(memory: Memory) -> tuple[Any, ...]:
    """topics, kind, event_time, participants, location, metadata (as stored)."""
    return (
        list_json(memory.topics),
        memory.kind.value,
        to_us(memory.event_time),
        list_json(memory.participants),
        memory.location,
        metadata_json(memory.metadata),
    )


def _json(text: str) -> Any:
    if text == "[]":
        return []
    if text == "{}":
        return {}
    return json.loads(text)


def row_to_entry(row: Sequence[Any], app_name: str, user_id: str) -> Entry:
    """Build an Entry from the first `N_ENTRY_COLUMNS` values of a row.

    Rows were validated when written, so the models are built without validating
    again or walking pydantic's field defaults (`checked_model`: every field named;
    a search builds up to a few hundred of them per call).
    """
    memory = checked_model(
        Memory,
        text=row[2],
        topics=_json(row[3]),
        kind=Kind(row[4]),
        event_time=from_us(row[5]),
        participants=_json(row[6]),
        location=row[7],
        metadata=_json(row[8]),
    )
    return checked_model(
        Entry,
        id=row[1],
        app_name=app_name,
        user_id=user_id,
        memory=memory,
        created_at=from_us_required(row[9]),
        updated_at=from_us_required(row[10]),
        score=None,
        rrf_score=None,
        expires_at=from_us(row[11]),
        valid_from=from_us_required(row[12]),
        valid_to=from_us(row[13]),
        superseded_by=row[14],
    )


def row_to_event(row: Sequence[Any]) -> HistoryEvent:
    return HistoryEvent(
        memory_id=row[0],
        operation=Operation(row[1]),
        text_before=row[2],
        text_after=row[3],
        at=from_us_required(row[4]),
        source=None if row[5] is None else Source.model_validate_json(row[5]),
    )
