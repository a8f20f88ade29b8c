"""`langmem-trpc memories ...`: add, search, list, get, update, delete, history, versions,
restore-version, clear, purge, users, apps."""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import click

from .._time import parse_time_or_raise
from ..errors import InvalidInputError, MemoryNotFoundError
from ..service.protocol import MemoryService
from ..types import Entry, Kind, SearchOptions, Source, UserKey
from ._common import (
    F,
    db_option,
    format_options,
    open_service,
    plural,
    reports_errors,
    split_commas,
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
    render_records,
    render_rows,
    safe,
    short_id,
    validity_span,
)

KIND = click.Choice([k.value for k in Kind])
MIN_PREFIX = 8
"""Shortest id prefix accepted wherever an id is taken."""
CLI_SOURCE = Source(actor="cli")


def _content_options(func: F) -> F:
    """--topic(s), --event-time, --participant, --location (see `_content`)."""
    func = click.option("--location", help="Where an episode happened.")(func)
    func = click.option(
        "--participant", "participants", multiple=True, help="Who took part (repeatable)."
    )(func)
    func = click.option("--event-time", help="When it happened: ISO 8601 or a date.")(func)
    func = click.option(
        "--topic",
        "--topics",
        "topics",
        multiple=True,
        help="Topics: repeat the option or separate them with commas.",
    )(func)
    return func


def _content(options: dict[str, Any]) -> dict[str, Any]:
    """The content options as service fields (topics split at commas); None where not given."""
    return {
        **options,
        "topics": split_commas(*options["topics"]) or None,
        "participants": list(options["participants"]) or None,
    }


def _validity_options(func: F) -> F:
    """--valid-from and --valid-until: when the memory is true in the world."""
    func = click.option(
        "--valid-until",
        help="When it stops being true (ISO 8601; a bare date means through its end); it is kept.",
    )(func)
    func = click.option(
        "--valid-from", help="When it became true (default: the event time, else now)."
    )(func)
    return func


def _view_options(func: F) -> F:
    """--as-of and --include-superseded: which versions a read returns (default: current)."""
    func = click.option(
        "--include-superseded",
        is_flag=True,
        help="Every version: superseded and lapsed ones too, each with its validity.",
    )(func)
    func = click.option(
        "--as-of", help="What was true at this time instead (ISO 8601 or a date, UTC if no zone)."
    )(func)
    return func


def _command(name: str) -> Callable[[F], F]:
    """A `memories` subcommand; its errors (a bad --app/--user included) are one line."""
    return lambda func: memories.command(name=name)(reports_errors(func))  # type: ignore[return-value]


def resolve_id(svc: MemoryService, user: UserKey, given: str, *, deleted_ok: bool = False) -> str:
    """The id `given` names: itself, or the one live memory (any version) whose id starts with it
    (`MIN_PREFIX`+ characters; several is an error). `deleted_ok` also takes the exact id
    of a deleted memory that still has history. Else MemoryNotFoundError, or for a shorter
    string an InvalidInputError that says how long a prefix must be."""
    if svc.get(user, given) is not None or (deleted_ok and svc.history(user, given)):
        return given
    if len(given) < MIN_PREFIX:
        raise InvalidInputError(
            "memory_id",
            f"no memory has the id {given!r}, and an id prefix needs at least "
            f"{MIN_PREFIX} characters",
        )
    every = svc.read(user, include_superseded=True)  # a superseded version has an id too
    matches = [e.id for e in every if e.id.startswith(given)]
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

    Reads show current memories: a fact whose value changed keeps its old
    versions (closed, not overwritten; `versions` lists them, `restore-version`
    reopens one), and list and search show them only with --as-of DATE or
    --include-superseded.

    Wherever a MEMORY_ID is taken, its first 8 or more characters do (an
    ambiguous prefix is an error). Human output escapes control characters
    in stored text; --format json/jsonl/csv prints it exactly. Commands that
    only read (search, list, get, history, versions, users, apps, and export) never
    create a database, a folder or tables: a missing --db path or a SQLite
    file without langmem-trpc tables is an error, and the file is left as it was.
    Commands that write create the database file, never a missing folder of a
    given --db or $LANGMEM_TRPC_DSN (a mistyped path is an error); only the
    default location ($LANGMEM_TRPC_HOME or the user data directory) is created.
    """


def _emit_one(entry: Entry, fmt: OutputFormat, table: Callable[[Entry], str] = entry_line) -> None:
    if fmt == "table":
        click.echo(table(entry))
    elif fmt == "json":  # one object, not a list
        click.echo(json.dumps(entry_json(entry), ensure_ascii=False, indent=2))
    else:
        emit(render_entries([entry], fmt, empty=""))


@_command("add")
@user_options
@_content_options
@_validity_options
@click.option("--kind", type=KIND, default="fact", show_default=True)
@format_options
@click.argument("text")
def memories_add(
    db: str | None, user: UserKey, kind: str | None, fmt: OutputFormat, text: str, **content: Any
) -> None:
    """Add a memory (the same content again returns the existing one).

    TEXT `-` reads the text from standard input.

    \b
    Examples:
        langmem-trpc memories add --db m.db --app support --user alice "Prefers dark mode"
        echo "Prefers dark mode" | langmem-trpc memories add --user alice -
    """
    with open_service(db) as svc:
        fields = _content(content)
        entry = svc.add(user, _read_text(text), kind=kind or "fact", source=CLI_SOURCE, **fields)
    _emit_one(entry, fmt)


@_command("update")
@user_options
@_content_options
@_validity_options
@click.option(
    "--supersede",
    is_flag=True,
    help="Keep the old text as a closed version and store the change as a new one (new id).",
)
@click.option("--kind", type=KIND)
@format_options
@click.argument("memory_id")
@click.argument("text", required=False)
def memories_update(
    db: str | None,
    user: UserKey,
    kind: str | None,
    supersede: bool,
    fmt: OutputFormat,
    memory_id: str,
    text: str | None,
    **content: Any,
) -> None:
    """Change a memory's text and/or any given field; its id stays the same.

    Without TEXT the text is kept (give at least one field to change);
    TEXT `-` reads it from standard input. With --supersede a changed text is
    a new version instead: the old one is closed (valid until the new one's
    --valid-from, default now) and kept; the new id is printed.

    \b
    Examples:
        langmem-trpc memories update --user alice 3f2a9c1b "Prefers light mode"
        langmem-trpc memories update --user alice 3f2a9c1b --topics ui,theme
        langmem-trpc memories update --user alice 3f2a9c1b --supersede "Runs Go 1.24"
    """
    if text is None and not (kind or any(content.values())):
        raise click.UsageError("give a new TEXT or at least one field to change")
    fields = _content(content)
    with open_service(db) as svc:
        target = resolve_id(svc, user, memory_id)
        current = svc.get(user, target)
        if current is None:  # deleted in between
            raise MemoryNotFoundError(target)
        new_text = current.text if text is None else _read_text(text)
        entry = svc.update(
            user, target, new_text, kind=kind, supersede=supersede, source=CLI_SOURCE, **fields
        )
    _emit_one(entry, fmt)


@_command("search")
@user_options
@click.option("--kind", type=KIND, help="Prefer this kind (falls back to others).")
@click.option("--after", help="Only events at or after this date (ISO 8601 or a date).")
@click.option("--before", help="Only events at or before this date.")
@click.option("--limit", default=10, show_default=True, type=click.IntRange(1, 1000))
@_view_options
@format_options
@click.argument("query")
def memories_search(
    db: str | None,
    user: UserKey,
    kind: str | None,
    after: str | None,
    before: str | None,
    limit: int,
    as_of: str | None,
    include_superseded: bool,
    fmt: OutputFormat,
    query: str,
) -> None:
    """Hybrid search (keyword + vector when an embedder is configured), de-duplicated.

    Current memories only, unless --as-of or --include-superseded asks for the
    past (the table then adds a VALID column). The table's SCORE is the
    absolute relevance in [0, 1], rounded to 2 places.

    \b
    Examples:
        langmem-trpc memories search --user alice "theme preference"
        langmem-trpc memories search --user alice --as-of 2026-07-01 "go version"
    """
    options = SearchOptions(
        as_of=as_of,
        include_superseded=include_superseded,
        kind=kind,
        time_after=parse_time_or_raise(after, "after"),
        time_before=parse_time_or_raise(before, "before"),
        max_results=limit,
        kind_fallback=kind is not None,
        deduplicate=True,
        hybrid=True,
    )
    with open_service(db, read=True) as svc:
        hits = svc.search(user, query, options)
    past = options.as_of is not None or include_superseded
    emit(render_entries(hits, fmt, empty="no matches", scores=True, validity=past))


@_command("list")
@user_options
@click.option(
    "--limit",
    default=50,
    show_default=True,
    type=click.IntRange(0),
    help="At most this many, newest first (0: all).",
)
@_view_options
@format_options
def memories_list(
    db: str | None,
    user: UserKey,
    limit: int,
    as_of: str | None,
    include_superseded: bool,
    fmt: OutputFormat,
) -> None:
    """List current memories, most recently updated first.

    A memory a newer version superseded, or whose validity lapsed, is not
    current: --as-of DATE lists what was true then, --include-superseded every
    version; either adds a VALID column (from, to, and the superseding id).

    \b
    Examples:
        langmem-trpc memories list --user alice --limit 20
        langmem-trpc memories list --user alice --as-of 2026-07-01
    """
    current = as_of is None and not include_superseded
    with open_service(db, read=True) as svc:
        entries = svc.read(user, limit or None, as_of=as_of, include_superseded=include_superseded)
        full = bool(limit) and len(entries) == limit
        total = svc.count(user) if full and current else len(entries)
    emit(render_entries(entries, fmt, empty="no memories", validity=not current))
    if fmt == "table" and total > len(entries):
        click.echo(f"showing {len(entries)} of {total} memories (--limit 0 shows all)", err=True)
    elif fmt == "table" and full and not current:
        click.echo(f"showing the first {len(entries)} (--limit 0 shows all)", err=True)


@_command("get")
@user_options
@format_options
@click.argument("memory_id")
def memories_get(db: str | None, user: UserKey, fmt: OutputFormat, memory_id: str) -> None:
    """Show one memory, every field.

    \b
    Example:
        langmem-trpc memories get --user alice 3f2a9c1b
    """
    with open_service(db, read=True) as svc:
        entry = svc.get(user, resolve_id(svc, user, memory_id))
    if entry is None:
        raise MemoryNotFoundError(memory_id)
    _emit_one(entry, fmt, entry_detail)


@_command("delete")
@user_options
@click.argument("memory_id")
def memories_delete(db: str | None, user: UserKey, memory_id: str) -> None:
    """Delete a memory (soft: its history stays until purge).

    \b
    Example:
        langmem-trpc memories delete --user alice 3f2a9c1b
    """
    with open_service(db) as svc:
        target = resolve_id(svc, user, memory_id)
        if not svc.delete(user, target, source=CLI_SOURCE):
            raise MemoryNotFoundError(target)
    click.echo(safe(f"deleted {target}"))


@_command("history")
@user_options
@format_options
@click.argument("memory_id")
def memories_history(db: str | None, user: UserKey, fmt: OutputFormat, memory_id: str) -> None:
    """Show every change to a memory (deleted ones too), oldest first.

    A table line ends with the write's source, when recorded: [actor thread ID
    decision LABEL], the decision being the update policy's (e.g. "update
    tier=update score=0.72 jaccard=0.67"). History records texts only: an
    update that kept the text (a new topic, kind, event time, participant or
    location, or no change) shows "text unchanged"; `memories get` shows the
    current fields.

    \b
    Example:
        langmem-trpc memories history --user alice 3f2a9c1b
    """
    with open_service(db, read=True) as svc:
        events = svc.history(user, resolve_id(svc, user, memory_id, deleted_ok=True))
    if fmt == "table":
        click.echo("\n".join(map(event_line, events)))
    elif fmt == "csv":
        raise click.UsageError("history prints table, json or jsonl")
    else:
        emit(render_records([e.model_dump(mode="json") for e in events], fmt, (), ""))


@_command("versions")
@user_options
@format_options
@click.argument("memory_id")
def memories_versions(db: str | None, user: UserKey, fmt: OutputFormat, memory_id: str) -> None:
    """List every version of a memory, oldest first, from any version's id.

    A fact that changed ("runs Go 1.23", then "upgraded to Go 1.24") is a
    chain: each older version is closed (VALID ends where the next began) and
    names the version that superseded it. The current one is marked `*`.

    \b
    Example:
        langmem-trpc memories versions --user alice 3f2a9c1b
    """
    with open_service(db, read=True) as svc:
        chain = svc.versions(user, resolve_id(svc, user, memory_id))
    if not chain:
        raise MemoryNotFoundError(memory_id)
    if fmt != "table":
        emit(render_entries(chain, fmt, empty=""))
        return
    rows = [
        ["*" if _is_current(e) else "", short_id(e.id), validity_span(e), e.text] for e in chain
    ]
    emit(render_rows(["", "ID", "VALID", "TEXT"], rows))


def _is_current(entry: Entry) -> bool:
    return entry.superseded_by is None and (
        entry.valid_to is None or entry.valid_to > datetime.now(timezone.utc)
    )


@_command("restore-version")
@user_options
@format_options
@click.argument("memory_id")
def memories_restore_version(
    db: str | None, user: UserKey, fmt: OutputFormat, memory_id: str
) -> None:
    """Make a superseded version current again (undo a supersede).

    The chain's current version, and any between it and the given one, are
    closed as never true (their validity ends where it began) and the given
    one reopened; history records each. A
    version that is already current is shown unchanged.

    \b
    Example:
        langmem-trpc memories restore-version --user alice 3f2a9c1b
    """
    with open_service(db) as svc:
        entry = svc.restore_version(user, resolve_id(svc, user, memory_id), source=CLI_SOURCE)
    _emit_one(entry, fmt)


def _confirm(question: str, done: str) -> None:
    """Ask `question`; anything but yes (no answer at all off a terminal included) is
    a one-line error, exit 1, before anything is written."""
    try:
        agreed = click.confirm(safe(question), default=False)
    except click.Abort:  # end of input (no terminal, nothing piped) or Ctrl-C
        agreed = False
        click.echo()  # end the unanswered prompt's line
    else:
        if not agreed and not sys.stdin.isatty():  # a piped answer is not echoed
            click.echo()
    if not agreed:
        raise click.ClickException(f"nothing {done}; pass --yes to skip the question")


@_command("clear")
@user_options
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def memories_clear(db: str | None, user: UserKey, yes: bool) -> None:
    """Delete all of a user's memories (soft; history stays).

    Without --yes it asks first; no answer (no terminal) deletes nothing (exit 1).

    \b
    Example:
        langmem-trpc memories clear --user alice --yes
    """
    if not yes:
        _confirm(f"Delete every memory of {user.app_name}/{user.user_id}?", "deleted")
    with open_service(db) as svc:
        count = svc.clear(user)
    click.echo(f"cleared {count} {plural(count, 'memory', 'memories')}")


@_command("purge")
@user_options
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.argument("memory_id", required=False)
def memories_purge(db: str | None, user: UserKey, yes: bool, memory_id: str | None) -> None:
    """Remove memories and their history for good (right to be forgotten).

    Without MEMORY_ID every row of the user goes, deleted ones included.
    Without --yes it asks first; no answer (no terminal) removes nothing (exit 1).

    \b
    Example:
        langmem-trpc memories purge --user alice --yes
    """
    with open_service(db) as svc:
        target = resolve_id(svc, user, memory_id, deleted_ok=True) if memory_id else None
        what = target or f"every memory of {user.app_name}/{user.user_id}"
        if not yes:
            _confirm(f"Permanently remove {what} and its history?", "purged")
        count = svc.purge(user, target)
    if target and not count:
        raise MemoryNotFoundError(target)
    click.echo(f"purged {count} {plural(count, 'memory', 'memories')}")


@_command("users")
@db_option
@click.option("--app", "app_name", help="Only this application.")
@format_options
def memories_users(db: str | None, app_name: str | None, fmt: OutputFormat) -> None:
    """List the users that have live memories, with their counts.

    \b
    Example:
        langmem-trpc memories users --app support
    """
    with open_service(db, read=True) as svc:
        counts = [(user, svc.count(user)) for user in svc.users(app_name)]
    rows = [{"app_name": u.app_name, "user_id": u.user_id, "memories": n} for u, n in counts]
    emit(render_records(rows, fmt, ["APP", "USER", "MEMORIES"], "no users"))


@_command("apps")
@db_option
@format_options
def memories_apps(db: str | None, fmt: OutputFormat) -> None:
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
    emit(render_records(rows, fmt, ["APP", "USERS", "MEMORIES"], "no apps"))
