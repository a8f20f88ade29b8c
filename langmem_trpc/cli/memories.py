"""`langmem-trpc memories ...`: add, search, list, get, update, delete, history, clear, purge."""

from __future__ import annotations

import click

from ..types import Kind, SearchOptions
from ._common import (
    F,
    emit,
    entry_json,
    format_entry,
    format_event,
    json_option,
    make_user,
    open_service,
    reports_errors,
    user_options,
)

KIND = click.Choice([k.value for k in Kind])


def _content_options(func: F) -> F:
    func = click.option("--location", default=None, help="Where an episode happened.")(func)
    func = click.option(
        "--participant", "participants", multiple=True, help="Who took part (repeatable)."
    )(func)
    func = click.option("--event-time", default=None, help="When it happened: ISO 8601 or a date.")(
        func
    )
    func = click.option("--topic", "topics", multiple=True, help="A topic (repeatable).")(func)
    return func


@click.group()
def memories() -> None:
    """Read and change one user's memories."""


@memories.command(name="add")
@user_options
@_content_options
@click.option("--kind", type=KIND, default="fact", show_default=True)
@json_option
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
    as_json: bool,
    text: str,
) -> None:
    """Add a memory (adding the same content again returns the existing one).

    \b
    Example:
        langmem-trpc memories add --db m.db --app support --user alice "Prefers dark mode"
    """
    with open_service(db) as svc:
        entry = svc.add(
            make_user(app_name, user_id),
            text,
            topics=list(topics),
            kind=kind or "fact",
            event_time=event_time,
            participants=list(participants),
            location=location,
        )
    emit(entry_json(entry), as_json, lambda: format_entry(entry))


@memories.command(name="update")
@user_options
@_content_options
@click.option("--kind", type=KIND, default=None)
@json_option
@click.argument("memory_id")
@click.argument("text")
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
    as_json: bool,
    memory_id: str,
    text: str,
) -> None:
    """Change a memory's text (and any given field); its id stays the same.

    \b
    Example:
        langmem-trpc memories update --user alice 3f2a... "Prefers light mode"
    """
    with open_service(db) as svc:
        entry = svc.update(
            make_user(app_name, user_id),
            memory_id,
            text,
            topics=list(topics) or None,
            kind=kind,
            event_time=event_time,
            participants=list(participants) or None,
            location=location,
        )
    emit(entry_json(entry), as_json, lambda: format_entry(entry))


@memories.command(name="search")
@user_options
@click.option("--kind", type=KIND, default=None, help="Prefer this kind (falls back to others).")
@click.option("--after", default=None, help="Only events at or after this date.")
@click.option("--before", default=None, help="Only events at or before this date.")
@click.option("--limit", default=10, show_default=True, type=click.IntRange(1, 1000))
@json_option
@click.argument("query")
@reports_errors
def memories_search(
    db: str | None,
    app_name: str,
    user_id: str,
    kind: str | None,
    after: str | None,
    before: str | None,
    limit: int | None,
    as_json: bool,
    query: str,
) -> None:
    """Hybrid search (keyword + vector when an embedder is configured), de-duplicated.

    \b
    Example:
        langmem-trpc memories search --user alice "theme preference"
    """
    options = SearchOptions(
        kind=kind,
        time_after=after,
        time_before=before,
        max_results=limit,
        kind_fallback=kind is not None,
        deduplicate=True,
        hybrid=True,
    )
    with open_service(db) as svc:
        hits = svc.search(make_user(app_name, user_id), query, options)
    emit(
        [entry_json(e) for e in hits],
        as_json,
        lambda: "\n".join(map(format_entry, hits)) or "no matches",
    )


@memories.command(name="list")
@user_options
@click.option(
    "--limit", default=None, type=click.IntRange(1), help="At most this many, newest first."
)
@json_option
@reports_errors
def memories_list(
    db: str | None,
    app_name: str,
    user_id: str,
    limit: int | None,
    as_json: bool,
) -> None:
    """List memories, most recently updated first.

    \b
    Example:
        langmem-trpc memories list --user alice --limit 20
    """
    with open_service(db) as svc:
        entries = svc.read(make_user(app_name, user_id), limit)
    emit(
        [entry_json(e) for e in entries],
        as_json,
        lambda: "\n".join(map(format_entry, entries)) or "no memories",
    )


@memories.command(name="get")
@user_options
@json_option
@click.argument("memory_id")
@reports_errors
def memories_get(
    db: str | None,
    app_name: str,
    user_id: str,
    as_json: bool,
    memory_id: str,
) -> None:
    """Show one memory.

    \b
    Example:
        langmem-trpc memories get --user alice 3f2a...
    """
    with open_service(db) as svc:
        entry = svc.get(make_user(app_name, user_id), memory_id)
    if entry is None:
        raise click.ClickException(f"memory {memory_id!r} not found")
    emit(entry_json(entry), as_json, lambda: format_entry(entry))


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
        langmem-trpc memories delete --user alice 3f2a...
    """
    with open_service(db) as svc:
        deleted = svc.delete(make_user(app_name, user_id), memory_id)
    if not deleted:
        raise click.ClickException(f"memory {memory_id!r} not found")
    click.echo(f"deleted {memory_id}")


@memories.command(name="history")
@user_options
@json_option
@click.argument("memory_id")
@reports_errors
def memories_history(
    db: str | None,
    app_name: str,
    user_id: str,
    as_json: bool,
    memory_id: str,
) -> None:
    """Show every change to a memory, oldest first.

    \b
    Example:
        langmem-trpc memories history --user alice 3f2a...
    """
    with open_service(db) as svc:
        events = svc.history(make_user(app_name, user_id), memory_id)
    emit(
        [e.model_dump(mode="json") for e in events],
        as_json,
        lambda: "\n".join(map(format_event, events)) or "no history",
    )


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
        click.confirm(f"Delete every memory of {app_name}/{user_id}?", abort=True)
    with open_service(db) as svc:
        count = svc.clear(make_user(app_name, user_id))
    click.echo(f"cleared {count} memories")


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
    what = memory_id or f"every memory of {app_name}/{user_id}"
    if not yes:
        click.confirm(f"Permanently remove {what} and its history?", abort=True)
    with open_service(db) as svc:
        count = svc.purge(make_user(app_name, user_id), memory_id)
    click.echo(f"purged {count} memories")
