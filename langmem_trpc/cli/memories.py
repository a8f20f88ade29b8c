"""`langmem-trpc memories ...`: add, search, list, get, update, delete, history, clear, purge, users, apps."""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

import click

from .._time import parse_time_or_raise
from ..errors import InvalidInputError, MemoryNotFoundError
from ..service.protocol import MemoryService
from ..types import Kind, SearchOptions, Source, UserKey
from ._common import (
    F,
    db_option,
    format_options,
    make_user,
    open_service,
    pick_format,
    plural,
    reports_errors,
    user_options,
)
from ._output import (
    OutputFormat,
    emit,
    entry_detail,
    entry_json,
    entry_line,
    event_line,
    render_entries,
    render_rows,
    safe,
)

KIND = click.Choice([k.value for k in Kind])
MIN_PREFIX = 8
"""Shortest id prefix accepted wherever an id is taken."""
CLI_SOURCE = Source(actor="cli")


def _split(values: tuple[str, ...]) -> list[str]:
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _content_options(func: F) -> F:
    func = click.option("--location", default=None, help="Where an episode happened.")(func)
    func = click.option(
        "--participant", "participants", multiple=True, help="Who took part (repeatable)."
    )(func)
    func = click.option("--event-time", default=None, help="When it happened: ISO 8601 or a date.")(
        func
    )
    func = click.option(
        "--topic",
        "--topics",
        "topics",
        multiple=True,
        help="Topics: repeat the option or separate them with commas.",
    )(func)
    return func


def resolve_id(svc: MemoryService, user: UserKey, given: str, *, deleted_ok: bool = False) -> str:
    """The id `given` names: itself, or the one live memory whose id starts with it.

    A prefix needs at least 8 characters; one that fits several memories is an
    error. `deleted_ok` also accepts the exact id of a deleted memory that
    still has history (history, purge). Unknown ids raise MemoryNotFoundError.
    """
    if svc.get(user, given) is not None:
        return given
    if deleted_ok and svc.history(user, given):
        return given
    if len(given) >= MIN_PREFIX:
        matches = [e.id for e in svc.read(user) if e.id.startswith(given)]
        if len(matches) == 1:
            return matches[0]
        if matches:
            raise InvalidInputError(
                "memory_id",
                f"{given!r} is the start of {len(matches)} memories' ids; give more characters",
            )
    raise MemoryNotFoundError(given)


def _read_text(text: str) -> str:
    """TEXT as given, or standard input when it is `-` (one trailing newline dropped)."""
    if text != "-":
        return text
    data = sys.stdin.read()
    return data[:-1] if data.endswith("\n") else data


@click.group()
def memories() -> None:
    """Read and change one user's memories.

    Wherever a MEMORY_ID is taken, its first 8 or more characters do (an
    ambiguous prefix is an error). Human output escapes control characters
    in stored text; --format json/jsonl/csv prints it exactly. Commands that
    only read (search, list, get, history, users, apps, and export) never
    create a database, a folder or tables: a missing --db path or a SQLite
    file without langmem-trpc tables is an error, and the file is left as it was.
    """


def _emit_one(entry: Any, fmt: OutputFormat) -> None:
    if fmt == "table":
        click.echo(entry_line(entry))
    elif fmt == "json":  # one object, not a list
        click.echo(_one_json(entry))
    else:
        emit(render_entries([entry], fmt, empty=""))


@memories.command(name="add")
@user_options
@_content_options
@click.option("--kind", type=KIND, default="fact", show_default=True)
@format_options
@click.argument("text")
@reports_errors
def memories_add(
    db: str | None,
    app_name: str,
    user_id: str,
    topics: tuple[str, ...],
    event_time: str | None,
    participants: tuple[str, ...],
    location: str | None,
    kind: str | None,
    fmt: OutputFormat,
    as_json: bool,
    text: str,
) -> None:
    """Add a memory (the same content again returns the existing one).

    TEXT `-` reads the text from standard input.

    \b
    Examples:
        langmem-trpc memories add --db m.db --app support --user alice "Prefers dark mode"
        echo "Prefers dark mode" | langmem-trpc memories add --user alice -
    """
    with open_service(db) as svc:
        entry = svc.add(
            make_user(app_name, user_id),
            _read_text(text),
            topics=_split(topics),
            kind=kind or "fact",
            event_time=event_time,
            participants=list(participants),
            location=location,
            source=CLI_SOURCE,
        )
    _emit_one(entry, pick_format(fmt, as_json))


@memories.command(name="update")
@user_options
@_content_options
@click.option("--kind", type=KIND, default=None)
@format_options
@click.argument("memory_id")
@click.argument("text", required=False)
@reports_errors
def memories_update(
    db: str | None,
    app_name: str,
    user_id: str,
    topics: tuple[str, ...],
    event_time: str | None,
    participants: tuple[str, ...],
    location: str | None,
    kind: str | None,
    fmt: OutputFormat,
    as_json: bool,
    memory_id: str,
    text: str | None,
) -> None:
    """Change a memory's text and/or any given field; its id stays the same.

    Without TEXT the text is kept (give at least one field to change);
    TEXT `-` reads it from standard input.

    \b
    Examples:
        langmem-trpc memories update --user alice 3f2a9c1b "Prefers light mode"
        langmem-trpc memories update --user alice 3f2a9c1b --topics ui,theme
    """
    changes = [topics, event_time, participants, location, kind]
    if text is None and not any(changes):
        raise click.UsageError("give a new TEXT or at least one field to change")
    user = make_user(app_name, user_id)
    with open_service(db) as svc:
        target = resolve_id(svc, user, memory_id)
        current = svc.get(user, target)
        if current is None:  # deleted in between
            raise MemoryNotFoundError(target)
        entry = svc.update(
            user,
            target,
            current.text if text is None else _read_text(text),
            topics=_split(topics) or None,
            kind=kind,
            event_time=event_time,
            participants=list(participants) or None,
            location=location,
            source=CLI_SOURCE,
        )
    _emit_one(entry, pick_format(fmt, as_json))


def _time(value: str | None, field: str) -> Any:
    return parse_time_or_raise(value, field) if value is not None else None


@memories.command(name="search")
@user_options
@click.option("--kind", type=KIND, default=None, help="Prefer this kind (falls back to others).")
@click.option(
    "--after", default=None, help="Only events at or after this date (ISO 8601 or a date)."
)
@click.option("--before", default=None, help="Only events at or before this date.")
@click.option("--limit", default=10, show_default=True, type=click.IntRange(1, 1000))
@format_options
@click.argument("query")
@reports_errors
def memories_search(
    db: str | None,
    app_name: str,
    user_id: str,
    kind: str | None,
    after: str | None,
    before: str | None,
    limit: int,
    fmt: OutputFormat,
    as_json: bool,
    query: str,
) -> None:
    """Hybrid search (keyword + vector when an embedder is configured), de-duplicated.

    The table's SCORE is the absolute relevance in [0, 1], rounded to 2 places.

    \b
    Example:
        langmem-trpc memories search --user alice "theme preference"
    """
    options = SearchOptions(
        kind=kind,
        time_after=_time(after, "after"),
        time_before=_time(before, "before"),
        max_results=limit,
        kind_fallback=kind is not None,
        deduplicate=True,
        hybrid=True,
    )
    with open_service(db, read=True) as svc:
        hits = svc.search(make_user(app_name, user_id), query, options)
    emit(render_entries(hits, pick_format(fmt, as_json), empty="no matches", scores=True))


@memories.command(name="list")
@user_options
@click.option(
    "--limit",
    default=50,
    show_default=True,
    type=click.IntRange(0),
    help="At most this many, newest first (0: all).",
)
@format_options
@reports_errors
def memories_list(
    db: str | None,
    app_name: str,
    user_id: str,
    limit: int,
    fmt: OutputFormat,
    as_json: bool,
) -> None:
    """List memories, most recently updated first.

    \b
    Example:
        langmem-trpc memories list --user alice --limit 20
    """
    fmt = pick_format(fmt, as_json)
    user = make_user(app_name, user_id)
    with open_service(db, read=True) as svc:
        entries = svc.read(user, limit or None)
        total = svc.count(user) if limit and len(entries) == limit else len(entries)
    emit(render_entries(entries, fmt, empty="no memories"))
    if fmt == "table" and total > len(entries):
        click.echo(f"showing {len(entries)} of {total} memories (--limit 0 shows all)", err=True)


@memories.command(name="get")
@user_options
@format_options
@click.argument("memory_id")
@reports_errors
def memories_get(
    db: str | None,
    app_name: str,
    user_id: str,
    fmt: OutputFormat,
    as_json: bool,
    memory_id: str,
) -> None:
    """Show one memory, every field.

    \b
    Example:
        langmem-trpc memories get --user alice 3f2a9c1b
    """
    user = make_user(app_name, user_id)
    with open_service(db, read=True) as svc:
        entry = svc.get(user, resolve_id(svc, user, memory_id))
    if entry is None:
        raise MemoryNotFoundError(memory_id)
    fmt = pick_format(fmt, as_json)
    if fmt == "json":  # one object, not a list
        click.echo(_one_json(entry))
    elif fmt == "table":
        click.echo(entry_detail(entry))
    else:
        emit(render_entries([entry], fmt, empty=""))


def _one_json(entry: Any) -> str:
    import json

    return json.dumps(entry_json(entry), ensure_ascii=False, indent=2)


@memories.command(name="delete")
@user_options
@click.argument("memory_id")
@reports_errors
def memories_delete(
    db: str | None,
    app_name: str,
    user_id: str,
    memory_id: str,
) -> None:
    """Delete a memory (soft: its history stays until purge).

    \b
    Example:
        langmem-trpc memories delete --user alice 3f2a9c1b
    """
    user = make_user(app_name, user_id)
    with open_service(db) as svc:
        target = resolve_id(svc, user, memory_id)
        if not svc.delete(user, target, source=CLI_SOURCE):
            raise MemoryNotFoundError(target)
    click.echo(safe(f"deleted {target}"))


@memories.command(name="history")
@user_options
@format_options
@click.argument("memory_id")
@reports_errors
def memories_history(
    db: str | None,
    app_name: str,
    user_id: str,
    fmt: OutputFormat,
    as_json: bool,
    memory_id: str,
) -> None:
    """Show every change to a memory (deleted ones too), oldest first.

    A table line ends with the write's source, when recorded: [actor thread ID
    decision LABEL], the decision being the update policy's (e.g. "update
    tier=update score=0.72 jaccard=0.67").

    \b
    Example:
        langmem-trpc memories history --user alice 3f2a9c1b
    """
    user = make_user(app_name, user_id)
    with open_service(db, read=True) as svc:
        events = svc.history(user, resolve_id(svc, user, memory_id, deleted_ok=True))
    fmt = pick_format(fmt, as_json)
    if fmt == "table":
        click.echo("\n".join(map(event_line, events)))
        return
    import json

    records = [e.model_dump(mode="json") for e in events]
    if fmt == "json":
        click.echo(json.dumps(records, ensure_ascii=False, indent=2))
    elif fmt == "jsonl":
        emit("\n".join(json.dumps(r, ensure_ascii=False) for r in records))
    else:
        raise click.UsageError("history prints table, json or jsonl")


@memories.command(name="clear")
@user_options
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@reports_errors
def memories_clear(
    db: str | None,
    app_name: str,
    user_id: str,
    yes: bool,
) -> None:
    """Delete all of a user's memories (soft; history stays).

    \b
    Example:
        langmem-trpc memories clear --user alice --yes
    """
    if not yes:
        click.confirm(safe(f"Delete every memory of {app_name}/{user_id}?"), abort=True)
    with open_service(db) as svc:
        count = svc.clear(make_user(app_name, user_id))
    click.echo(f"cleared {count} {plural(count, 'memory', 'memories')}")


@memories.command(name="purge")
@user_options
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.argument("memory_id", required=False)
@reports_errors
def memories_purge(
    db: str | None,
    app_name: str,
    user_id: str,
    yes: bool,
    memory_id: str | None,
) -> None:
    """Remove memories and their history for good (right to be forgotten).

    Without MEMORY_ID every row of the user goes, deleted ones included.

    \b
    Example:
        langmem-trpc memories purge --user alice --yes
    """
    user = make_user(app_name, user_id)
    with open_service(db) as svc:
        target = resolve_id(svc, user, memory_id, deleted_ok=True) if memory_id else None
        what = target or f"every memory of {app_name}/{user_id}"
        if not yes:
            click.confirm(safe(f"Permanently remove {what} and its history?"), abort=True)
        count = svc.purge(user, target)
    if target and not count:
        raise MemoryNotFoundError(target)
    click.echo(f"purged {count} {plural(count, 'memory', 'memories')}")


@memories.command(name="users")
@db_option
@click.option("--app", "app_name", default=None, help="Only this application.")
@format_options
@reports_errors
def memories_users(db: str | None, app_name: str | None, fmt: OutputFormat, as_json: bool) -> None:
    """List the users that have live memories, with their counts.

    \b
    Example:
        langmem-trpc memories users --app support
    """
    with open_service(db, read=True) as svc:
        counts = [(user, svc.count(user)) for user in svc.users(app_name)]
    rows = [{"app_name": u.app_name, "user_id": u.user_id, "memories": n} for u, n in counts]
    _emit_rows(rows, pick_format(fmt, as_json), ["APP", "USER", "MEMORIES"], "no users")


@memories.command(name="apps")
@db_option
@format_options
@reports_errors
def memories_apps(db: str | None, fmt: OutputFormat, as_json: bool) -> None:
    """List the applications that have live memories, with user and memory counts.

    \b
    Example:
        langmem-trpc memories apps
    """
    with open_service(db, read=True) as svc:
        counts = [(user, svc.count(user)) for user in svc.users()]
    users = Counter(u.app_name for u, _ in counts)
    total: Counter[str] = Counter()
    for user, n in counts:
        total[user.app_name] += n
    rows = [{"app_name": a, "users": users[a], "memories": total[a]} for a in sorted(users)]
    _emit_rows(rows, pick_format(fmt, as_json), ["APP", "USERS", "MEMORIES"], "no apps")


def _emit_rows(
    rows: list[dict[str, Any]], fmt: OutputFormat, headers: list[str], empty: str
) -> None:
    import csv
    import io
    import json

    if fmt == "json":
        click.echo(json.dumps(rows, ensure_ascii=False, indent=2))
    elif fmt == "jsonl":
        emit("\n".join(json.dumps(r, ensure_ascii=False) for r in rows))
    elif fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(rows[0].keys() if rows else [h.lower() for h in headers])
        writer.writerows(r.values() for r in rows)
        emit(buffer.getvalue().rstrip("\n"))
    elif not rows:
        click.echo(empty)
    else:
        click.echo(render_rows(headers, [[str(v) for v in r.values()] for r in rows]))
