"""What every command shares: where the database is, identity options, output."""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click

from ..errors import LangmemTrpcError
from ..service._core import Limits
from ..service.protocol import MemoryService
from ..types import Entry, HistoryEvent, UserKey

F = TypeVar("F", bound=Callable[..., Any])

DB_HELP = (
    "SQLite file, or a postgresql:// URL / libpq 'host=... dbname=...' string. Default: memories.db in $LANGMEM_TRPC_HOME, "
    "else in the user data directory."
)


CLI_LIMITS = Limits()
"""The limits every service the CLI opens enforces (`import` checks records against them)."""


def plural(count: int, one: str, many: str | None = None) -> str:
    """`one` for a count of 1, else `many` (default: `one` + "s")."""
    return one if count == 1 else (many or one + "s")


def default_db() -> str:
    if url := os.environ.get("LANGMEM_TRPC_DSN"):
        return url
    home = os.environ.get("LANGMEM_TRPC_HOME")
    if home:
        return str(Path(home) / "memories.db")
    import platformdirs

    return str(Path(platformdirs.user_data_dir("langmem-trpc")) / "memories.db")


def db_option(func: F) -> F:
    return click.option("--db", "db", default=None, help=DB_HELP)(func)


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(func)


def user_options(func: F) -> F:
    func = click.option(
        "--user", "user_id", required=True, help="User id (exact, case-sensitive)."
    )(func)
    func = click.option(
        "--app", "app_name", default="default", show_default=True, help="Application name."
    )(func)
    return db_option(func)


def reports_errors(func: F) -> F:
    """Library errors become one clear line and exit code 1 (only the CLI does this)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except LangmemTrpcError as exc:
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from None

    return wrapper  # type: ignore[return-value]


_LIBPQ_KEYS = (
    "host|hostaddr|port|dbname|user|password|passfile|service|options|application_name|"
    "connect_timeout|client_encoding|sslmode|sslrootcert|sslcert|sslkey|sslpassword|"
    "target_session_attrs|require_auth|channel_binding|gssencmode|keepalives"
)
_LIBPQ_PAIR = re.compile(rf"^\s*({_LIBPQ_KEYS})\s*=")


def is_postgres_dsn(target: str) -> bool:
    """A postgres:// URL or a libpq key=value string starting with a libpq keyword.

    Any common keyword counts, `password=` included, so a string that starts
    with its password is never taken for a SQLite file name.
    """
    if target.startswith(("postgres://", "postgresql://")):
        return True
    return bool(_LIBPQ_PAIR.match(target))


@contextmanager
def open_service(db: str | None) -> Iterator[MemoryService]:
    """Open the backend the --db value names; closed on exit."""
    target = db or default_db()
    service: MemoryService
    if is_postgres_dsn(target):
        from ..backends.postgres import PostgresMemoryService

        service = PostgresMemoryService(target, limits=CLI_LIMITS)
        service.setup()  # type: ignore[attr-defined]
    else:
        from ..backends.sqlite import SQLiteMemoryService

        service = SQLiteMemoryService(target, limits=CLI_LIMITS)
    try:
        yield service
    finally:
        service.close()


def make_user(app_name: str, user_id: str) -> UserKey:
    return UserKey(app_name, user_id)


def entry_json(entry: Entry) -> dict[str, Any]:
    return entry.model_dump(mode="json", exclude_none=True)


def format_entry(entry: Entry) -> str:
    memory = entry.memory
    meta = [memory.kind.value]
    if memory.event_time:
        meta.append(memory.event_time.strftime("%Y-%m-%d"))
    if memory.participants:
        meta.append("with " + ", ".join(memory.participants))
    if memory.location:
        meta.append("at " + memory.location)
    if memory.topics:
        meta.append("topics: " + ", ".join(memory.topics))
    score = f" score={entry.score:.3f}" if entry.score is not None else ""
    return f"{entry.id}  {memory.text}  ({'; '.join(meta)}){score}"


def format_event(event: HistoryEvent) -> str:
    change = {
        "add": f"+ {event.text_after!r}",
        "update": f"{event.text_before!r} -> {event.text_after!r}",
    }.get(event.operation.value, f"- {event.text_before!r}")
    where = ""
    if event.source and (event.source.thread_id or event.source.actor):
        where = f"  [{event.source.actor or ''}{' thread ' + event.source.thread_id if event.source.thread_id else ''}]"
    return f"{event.at.isoformat(timespec='seconds')}  {event.operation.value:<6} {change}{where}"


def emit(data: Any, as_json: bool, text: Callable[[], str]) -> None:
    if as_json:
        click.echo(json.dumps(data, ensure_ascii=False, indent=2))
    else:
        click.echo(text())
