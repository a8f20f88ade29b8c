"""`langmem-trpc export` / `import`: the commands over `langmem_trpc.transfer`.

The format, its checks and the import rules live in `langmem_trpc.transfer` (the
inspector's download uses them too); this module adds the options and output.
"""

from __future__ import annotations

from collections.abc import Callable

import click

from ..errors import InvalidInputError
from ..transfer import checked_records, export_lines, import_record
from ..types import Entry, UserKey, check_identifier
from ._common import CLI_LIMITS, db_option, open_service, plural, reports_errors
from ._output import progress, safe


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

    Every version is written, superseded and lapsed ones too, with its
    valid_from, valid_to and superseded_by, so an import restores the chains.
    The format (one JSON object a line: format, entry, history), its checks
    and the import rules are the public module `langmem_trpc.transfer`.
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
            for line in export_lines(svc, users):
                out.write(line)
                count += 1
    where = "standard output" if output == "-" else output
    message = safe(f"exported {count} {plural(count, 'memory', 'memories')} to {where}")
    click.echo(message, err=output == "-")


def _only(app_name: str | None, user_id: str | None) -> Callable[[Entry], None]:
    """Refuses an entry of another app than `app_name` or another user than `user_id`."""

    def accept(entry: Entry) -> None:
        if app_name is not None and entry.app_name != app_name:
            raise InvalidInputError(
                "app_name", f"is {entry.app_name!r}, not --app {app_name!r}; nothing was imported"
            )
        if user_id is not None and entry.user_id != user_id:
            raise InvalidInputError(
                "user_id", f"is {entry.user_id!r}, not --user {user_id!r}; nothing was imported"
            )

    return accept


@click.command(name="import")
@db_option
@click.option(
    "--app", "app_name", help="Only records of this application (any other stops the import)."
)
@click.option(
    "--user", "user_id", help="Only records of this user of --app (any other stops the import)."
)
@click.argument("source", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@reports_errors
def import_memories(db: str | None, app_name: str | None, user_id: str | None, source: str) -> None:
    """Load a JSONL export; memories keep their ids, times and history.

    SOURCE `-` reads standard input. Every record is first checked exactly like `memories add` checks its
    input (text, topics, participants, times, ids, the per-user capacity);
    the first bad record stops the import with `line N: field: problem`
    before anything is written, so a bad record never leaves part of a file
    imported. With --app (and --user) a record of any other application
    (or user) is such a bad record: a file meant for one user cannot write
    another's memories. A record replaces the memory with the same id of
    its own user only (another user's memory with that id is a different
    memory, never touched), so rerunning an import that a backend failure
    stopped partway is safe. Every imported history event is recorded with
    the actor "import" (the file's actor is not trusted; its thread and
    message ids are kept); a record without history gets an "add" by the
    import. Validity comes back as exported (a chain stays a chain); a
    record of an older export without it imports as a current memory valid
    from its event time, else its creation.
    Progress goes to standard error (a bar on a terminal, else a line every
    few seconds).

    \b
    Examples:
        langmem-trpc import --db other.db alice.jsonl
        langmem-trpc import --db other.db --app support --user alice alice.jsonl
    """
    if user_id is not None and app_name is None:
        raise click.UsageError("--user needs --app (a user id is unique within its application)")
    if app_name is not None:  # a bad filter is a field error before anything is read
        check_identifier("app_name", app_name)
    if user_id is not None:
        check_identifier("user_id", user_id)
    with open_service(db) as svc:
        with click.open_file(source, "rb") as lines:
            records = checked_records(lines, svc, CLI_LIMITS, _only(app_name, user_id))
        for record in progress(records, "importing", len(records)):
            import_record(svc, record)
    click.echo(f"imported {len(records)} {plural(len(records), 'memory', 'memories')}")
