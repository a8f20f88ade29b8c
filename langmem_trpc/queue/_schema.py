"""procrastinate's schema in the queue's database: created when missing, migrated forward.

procrastinate keeps no schema version in the database, so `setup()` records in
`langmem_queue_schema` each migration it applies (`MM.mm.pp_NN_name.sql`, in name
order), or the installed last one when it creates the whole schema. In one transaction
under the setup lock (docs/operating.md, "A deploy that bumps procrastinate"):

* no schema: apply procrastinate's schema, record its last migration;
* a recorded version: apply the installed migrations after it, in order;
* a recorded version newer than the installed procrastinate: `ConfigurationError`;
* a schema without a record: taken as current when every function the installed
  schema defines exists, else `ConfigurationError` naming the migrations folder.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError

logger = logging.getLogger(__name__)

CREATE_RECORD = """CREATE TABLE IF NOT EXISTS langmem_queue_schema (
    migration text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"""
RECORD = "INSERT INTO langmem_queue_schema (migration) VALUES (%s) ON CONFLICT DO NOTHING"
FUNCTIONS = "SELECT DISTINCT proname::text FROM pg_proc WHERE proname LIKE 'procrastinate%'"
_FUNCTION = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+(\w+)", re.IGNORECASE)


def migrations() -> list[Path]:
    """The installed procrastinate's migration files, in the order they apply."""
    from procrastinate.schema import SchemaManager

    return sorted(Path(SchemaManager.get_migrations_path()).glob("*.sql"))


def migrate(conn: Any) -> None:
    """Bring procrastinate's schema on `conn` (in a transaction holding the setup lock)
    to the installed procrastinate's (see the module docstring)."""
    from procrastinate.schema import SchemaManager

    files = migrations()
    latest = files[-1].stem
    exists = conn.execute("SELECT to_regclass('procrastinate_jobs') IS NOT NULL").fetchone()[0]
    conn.execute(CREATE_RECORD)
    if not exists:
        conn.execute(SchemaManager.get_schema())
        conn.execute(RECORD, (latest,))
        logger.info("queue: created procrastinate's schema (%s)", latest)
        return
    at = conn.execute("SELECT max(migration) FROM langmem_queue_schema").fetchone()[0]
    if at is None:  # no record (the table is new, or empty)
        _check_unrecorded(conn, latest)
        return
    if at > latest:
        raise ConfigurationError(
            f"procrastinate's schema in the database is at migration {at}, newer than the "
            f"installed procrastinate's last ({latest}): upgrade procrastinate (the [queue] "
            "extra) to the version the other workers and producers run"
        )
    for path in files:
        if path.stem > at:
            logger.info("queue: applying procrastinate migration %s", path.stem)
            conn.execute(path.read_text(encoding="utf-8"))
            conn.execute(RECORD, (path.stem,))


def _check_unrecorded(conn: Any, latest: str) -> None:
    """Record a schema without a record as current, or refuse it when it lacks functions."""
    from procrastinate.schema import SchemaManager

    wanted = set(_FUNCTION.findall(SchemaManager.get_schema()))
    present = {row[0] for row in conn.execute(FUNCTIONS).fetchall()}
    missing = sorted(wanted - present)
    if missing:
        raise ConfigurationError(
            "procrastinate's schema in the database is older than the installed "
            f"procrastinate's (missing {', '.join(missing)}) and has no version recorded "
            "in langmem_queue_schema: apply the migrations it lacks, in order, from "
            f"{migrations()[0].parent} (`procrastinate schema --migrations-path`), then "
            "run setup() again; or record the last one it has (INSERT INTO "
            "langmem_queue_schema (migration) VALUES ('<file name without .sql>')) and "
            "setup() applies the rest"
        )
    conn.execute(RECORD, (latest,))
