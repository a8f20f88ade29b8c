"""The recorded embedder of a SQLite file (`service/identity.py`), in `langmem_settings`.

Two keys: `embedder` (the identity as JSON) and `embedder_generation` (its
re-embed count, an integer read on every search and write: one primary-key
lookup in the transaction the operation runs anyway, so a re-embed's cutover
is noticed by the very next operation of every other service and process).
"""

from __future__ import annotations

import sqlite3

from ...errors import ConfigurationError
from ...service.identity import EmbedderIdentity, check_identity, stale_error
from ...service.info import StoreInfo

SELECT = "SELECT value FROM langmem_settings WHERE key = 'embedder'"
SELECT_GENERATION = "SELECT value FROM langmem_settings WHERE key = 'embedder_generation'"
UPSERT = """INSERT INTO langmem_settings (key, value) VALUES (?, ?)
    ON CONFLICT (key) DO UPDATE SET value = excluded.value"""
STORED_WIDTH = (
    "SELECT length(embedding) FROM memories WHERE embedding IS NOT NULL"
    " AND length(embedding) != ? LIMIT 1"
)


def recorded(conn: sqlite3.Connection) -> EmbedderIdentity | None:
    row = conn.execute(SELECT).fetchone()
    return None if row is None else EmbedderIdentity.from_json(row[0])


def record(conn: sqlite3.Connection, identity: EmbedderIdentity) -> None:
    conn.execute(UPSERT, ("embedder", identity.to_json()))
    conn.execute(UPSERT, ("embedder_generation", str(identity.generation)))


def adopt(conn: sqlite3.Connection, current: EmbedderIdentity, path: str) -> EmbedderIdentity:
    """The file's identity, checked against `current`; a file that records none (new, or
    written before identities existed) records `current`, unless it already holds
    vectors of another width (then it was written by another model: refused)."""
    stored = recorded(conn)
    if stored is None:
        other = conn.execute(STORED_WIDTH, (current.dims * 4,)).fetchone()
        if other is not None:
            stored = EmbedderIdentity("an unrecorded embedder", int(other[0]) // 4, ())
            check_identity(stored, current, repr(path))
        record(conn, current)
        return current
    return check_identity(stored, current, repr(path))


def check_generation(conn: sqlite3.Connection, opened: int, path: str) -> None:
    """Raise `ConfigurationError` when a re-embed cut the file over since the service opened."""
    row = conn.execute(SELECT_GENERATION).fetchone()
    if row is not None and int(row[0]) != opened:
        now = recorded(conn)
        if now is None:  # pragma: no cover - the two keys are written together
            raise ConfigurationError(f"embeddings: the store {path!r} lost its embedder record")
        raise stale_error(repr(path), opened, now)


def store_info(conn: sqlite3.Connection) -> StoreInfo:
    """`langmem-trpc info`'s figures, read in one transaction."""
    (version,) = conn.execute("SELECT coalesce(max(version), 0) FROM langmem_migrations").fetchone()
    users, live, deleted = conn.execute(
        """SELECT (SELECT count(*) FROM (SELECT DISTINCT app_name, user_id FROM memories)),
            count(*) FILTER (WHERE deleted_at IS NULL),
            count(*) FILTER (WHERE deleted_at IS NOT NULL) FROM memories"""
    ).fetchone()
    target = conn.execute(
        "SELECT value FROM langmem_settings WHERE key = 'reembed_target'"
    ).fetchone()
    done = None
    if target is not None:
        (done,) = conn.execute(
            """SELECT count(*) FROM memories AS m
            JOIN reembed_vectors AS s ON s.rid = m.rid AND s.text = m.text"""
        ).fetchone()
    return StoreInfo(
        "sqlite",
        str(version),
        recorded(conn),
        int(users),
        int(live or 0),
        int(deleted or 0),
        None if target is None else EmbedderIdentity.from_json(target[0]),
        done,
    )
