"""The recorded embedder of a PostgreSQL database (`service/identity.py`), in
`langmem_settings` (keys `embedder` and `embedder_generation`, as on SQLite).

Checked by `setup()`: before the migrations (so a refused embedder changes
nothing, not even a new dimension's migrations), and recorded after them on a
database that has none, under setup's advisory lock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ...errors import ConfigurationError
from ...service.identity import (
    PROBE_TEXT,
    EmbedderIdentity,
    check_identity,
    from_probe,
    stale_error,
)
from ...service.info import StoreInfo
from ._ops import Embed, Plan, Sql

T = TypeVar("T")

SETTINGS_EXIST = "SELECT to_regclass('langmem_settings') IS NOT NULL AS present"
SELECT = "SELECT value FROM langmem_settings WHERE key = 'embedder'"
STORED_DIMS = """SELECT atttypmod AS dims FROM pg_attribute
WHERE attrelid = to_regclass('langmem_memories') AND attname = 'embedding'"""
RECORD = """INSERT INTO langmem_settings (key, value)
VALUES ('embedder', %(identity)s), ('embedder_generation', %(generation)s)
ON CONFLICT (key) DO NOTHING"""


def probe(embeddings: object) -> Plan[EmbedderIdentity]:
    """The service embedder's identity (one query embedding of `PROBE_TEXT`)."""
    vectors = yield Embed([PROBE_TEXT], query=True)
    return from_probe(embeddings, vectors[0])  # type: ignore[arg-type]


def recorded() -> Plan[EmbedderIdentity | None]:
    present = yield Sql(SETTINGS_EXIST)
    if not present[0]["present"]:
        return None
    rows = yield Sql(SELECT)
    if not rows or rows[0]["value"] is None:
        return None
    return EmbedderIdentity.from_json(rows[0]["value"])


def check_before_setup(current: EmbedderIdentity) -> Plan[EmbedderIdentity | None]:
    """Raise `ConfigurationError` when the database records another embedder, or holds
    vectors of another dimension without a record; the stored identity, if any."""
    stored = yield from recorded()
    if stored is None:
        rows = yield Sql(STORED_DIMS)
        dims = int(rows[0]["dims"]) if rows and rows[0]["dims"] > 0 else None
        if dims is not None and dims != current.dims:
            unrecorded = EmbedderIdentity("an unrecorded embedder", dims, ())
            check_identity(unrecorded, current, "in this PostgreSQL database")
        return None
    return check_identity(stored, current, "in this PostgreSQL database")


def record_after_setup(current: EmbedderIdentity) -> Plan[EmbedderIdentity]:
    """Record `current` on a database that has no identity yet; the identity now stored."""
    yield Sql(RECORD, {"identity": current.to_json(), "generation": str(current.generation)})
    stored = yield from recorded()
    if stored is None:  # pragma: no cover - just written in this transaction
        raise ConfigurationError("embeddings: the database lost its embedder record")
    return check_identity(stored, current, "in this PostgreSQL database")


INFO = """SELECT
    (SELECT string_agg(scope || ' ' || v, ', ' ORDER BY scope)
     FROM (SELECT scope, max(version) AS v FROM langmem_migrations GROUP BY scope) AS x)
        AS version,
    (SELECT count(*) FROM (SELECT DISTINCT app_name, user_id FROM langmem_memories) AS u)
        AS users,
    (SELECT count(*) FROM langmem_memories WHERE deleted_at IS NULL) AS live,
    (SELECT count(*) FROM langmem_memories WHERE deleted_at IS NOT NULL) AS deleted"""


def store_info() -> Plan[StoreInfo]:
    """`langmem-trpc info`'s figures (migrations per scope: "core N, vector M")."""
    rows = yield Sql(INFO)
    row = rows[0]
    stored = yield from recorded()
    counts = int(row["users"]), int(row["live"]), int(row["deleted"])
    return StoreInfo("postgres", str(row["version"] or "0"), stored, *counts)


REPLACE = """INSERT INTO langmem_settings (key, value)
VALUES ('embedder', %(identity)s), ('embedder_generation', %(generation)s)
ON CONFLICT (key) DO UPDATE SET value = excluded.value"""
SELECT_GENERATION = "SELECT value FROM langmem_settings WHERE key = 'embedder_generation'"


def _check(generation: int, lock: bool) -> Plan[None]:
    rows = yield Sql(SELECT_GENERATION + (" FOR SHARE" if lock else ""))
    if rows and int(rows[0]["value"]) != generation:
        now = yield from recorded()
        if now is None:  # pragma: no cover - the two keys are written together
            raise ConfigurationError("embeddings: the database lost its embedder record")
        raise stale_error("in this PostgreSQL database", generation, now)


def write_checked(plan: Plan[T], generation: Callable[[], int]) -> Plan[T]:
    """`plan` (run in one transaction) after a check that no re-embed cut over since the
    service opened (`generation()` is read when the plan starts, under the service's model
    lock); the `FOR SHARE` row lock makes a cutover wait for this write."""
    yield from _check(generation(), lock=True)
    return (yield from plan)


def read_checked(plan: Plan[T], generation: Callable[[], int]) -> Plan[T]:
    """`plan` (autocommit statements) between two generation readings: equal readings
    mean every statement ran on one side of any cutover."""
    opened = generation()
    yield from _check(opened, lock=False)
    result = yield from plan
    yield from _check(opened, lock=False)
    return result
