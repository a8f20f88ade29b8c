"""`langmem-trpc export` / `import`: JSONL, one memory per line with its history.

Lossless for live memories: id, text, every field, metadata, created_at,
updated_at and the full history come back exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..types import UserKey
from ._common import CLI_LIMITS, db_option, open_service, plural, reports_errors
from ._records import FORMAT, checked_records


@click.command(name="export")
@db_option
@click.option("--app", "app_name", default="default", show_default=True)
@click.option("--user", "user_id", default=None, help="One user; default: every user of the app.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True)
@reports_errors
def export_memories(db: str | None, app_name: str, user_id: str | None, output: Path) -> None:
    """Write live memories and their history to a JSONL file.

    \b
    Example:
        langmem-trpc export --db m.db --app support --user alice -o alice.jsonl
    """
    count = 0
    with open_service(db) as svc, output.open("w", encoding="utf-8") as out:
        users = [UserKey(app_name, user_id)] if user_id else svc.users(app_name)
        for user in users:
            for entry in reversed(svc.read(user)):
                record = {
                    "format": FORMAT,
                    "entry": entry.model_dump(mode="json", exclude={"score", "rrf_score"}),
                    "history": [h.model_dump(mode="json") for h in svc.history(user, entry.id)],
                }
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                count += 1
    click.echo(f"exported {count} memories to {output}")


@click.command(name="import")
@db_option
@click.argument("source", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@reports_errors
def import_memories(db: str | None, source: Path) -> None:
    """Load a JSONL export; memories keep their ids, times and history.

    Every record is first checked exactly like `memories add` checks its
    input (text, topics, participants, times, ids, the per-user capacity);
    the first bad record stops the import with `line N: field: problem`
    before anything is written, so a file is imported whole or not at all.

    \b
    Example:
        langmem-trpc import --db other.db alice.jsonl
    """
    with open_service(db) as svc:
        records = checked_records(source, svc, CLI_LIMITS)
        for record in records:
            svc.restore(record.entry.user, record.entry, record.history)
    click.echo(f"imported {len(records)} {plural(len(records), 'memory', 'memories')}")
