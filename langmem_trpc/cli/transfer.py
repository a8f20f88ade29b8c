"""`langmem-trpc export` / `import`: JSONL, one memory per line with its history.

Lossless for live memories: id, every field, metadata, times and history.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import click

from ..service.protocol import MemoryService
from ..types import UserKey
from ._common import CLI_LIMITS, db_option, open_service, plural, reports_errors
from ._output import progress, safe
from ._records import FORMAT, checked_records


def _export_records(svc: MemoryService, users: list[UserKey]) -> Iterator[str]:
    for user in users:
        for entry in reversed(svc.read(user)):
            record = {
                "format": FORMAT,
                "entry": entry.model_dump(mode="json", exclude={"score", "rrf_score"}),
                "history": [h.model_dump(mode="json") for h in svc.history(user, entry.id)],
            }
            yield json.dumps(record, ensure_ascii=False) + "\n"


@click.command(name="export")
@db_option
@click.option("--app", "app_name", default="default", show_default=True)
@click.option("--user", "user_id", help="One user; default: every user of the app.")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, allow_dash=True),
    required=True,
    help="JSONL file to write, or - for standard output.",
)
@reports_errors
def export_memories(db: str | None, app_name: str, user_id: str | None, output: str) -> None:
    """Write live memories and their history to a JSONL file.

    `-o -` writes to standard output; the summary line goes to standard error when the records go to standard output.

    \b
    Examples:
        langmem-trpc export --db m.db --app support --user alice -o alice.jsonl
        langmem-trpc export --db m.db --app support -o - | gzip > support.jsonl.gz
    """
    count = 0
    with open_service(db, read=True) as svc:
        users = [UserKey(app_name, user_id)] if user_id else svc.users(app_name)
        with click.open_file(output, "w", encoding="utf-8") as out:
            for line in _export_records(svc, users):
                out.write(line)
                count += 1
    where = "standard output" if output == "-" else output
    message = safe(f"exported {count} {plural(count, 'memory', 'memories')} to {where}")
    click.echo(message, err=output == "-")


@click.command(name="import")
@db_option
@click.argument("source", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@reports_errors
def import_memories(db: str | None, source: str) -> None:
    """Load a JSONL export; memories keep their ids, times and history.

    SOURCE `-` reads standard input. Every record is first checked exactly like `memories add` checks its
    input (text, topics, participants, times, ids, the per-user capacity);
    the first bad record stops the import with `line N: field: problem`
    before anything is written, so a bad record never leaves part of a file
    imported. Records replace memories with the same id, so rerunning an
    import that a backend failure stopped partway is safe.
    Progress goes to standard error (a bar on a terminal, else a line every
    few seconds).

    \b
    Example:
        langmem-trpc import --db other.db alice.jsonl
    """
    with open_service(db) as svc:
        with click.open_file(source, "rb") as lines:
            records = checked_records(lines, svc, CLI_LIMITS)
        for record in progress(records, "importing", len(records)):
            svc.restore(record.entry.user, record.entry, record.history)
    click.echo(f"imported {len(records)} {plural(len(records), 'memory', 'memories')}")
