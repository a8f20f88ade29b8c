"""What every command shares: where the database is, identity options, output."""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
from pydantic import ValidationError

from ..errors import ConfigurationError, LangmemTrpcError
from ..registry import open as open_store
from ..registry import scheme_of, split_url
from ..service.protocol import MemoryService
from ..service.rules import Limits
from ..transfer import validation_problem
from ..types import UserKey
from ._output import FORMATS, OutputFormat, safe

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

DB_HELP = (
    "SQLite file, a postgresql:// URL / libpq 'host=... dbname=...' string, or any URL "
    "langmem_trpc.open() takes (sqlite:///path, memory://, a plugin's scheme). Default: "
    "$LANGMEM_TRPC_DSN, else memories.db in $LANGMEM_TRPC_HOME, else in the user data directory."
)


CLI_LIMITS = Limits()
"""The limits every service the CLI opens enforces (`import` checks records against them)."""


def split_commas(*values: str) -> list[str]:
    """The comma-separated parts of `values`, stripped; empty ones dropped."""
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def plural(count: int, one: str, many: str | None = None) -> str:
    """`one` for a count of 1, else `many` (default: `one` + "s")."""
    return one if count == 1 else (many or one + "s")


def default_db() -> str:
    if url := os.environ.get("LANGMEM_TRPC_DSN"):
        return url
    if home := os.environ.get("LANGMEM_TRPC_HOME"):
        return str(Path(home) / "memories.db")
    import platformdirs

    return str(Path(platformdirs.user_data_dir("langmem-trpc")) / "memories.db")


def db_option(func: F) -> F:
    return click.option("--db", help=DB_HELP)(func)


def format_options(func: F) -> F:
    """`--format table|json|jsonl|csv` and `--json` (short for `--format json`): `fmt`."""

    @functools.wraps(func)
    def wrapper(*args: Any, fmt: OutputFormat, as_json: bool, **kwargs: Any) -> Any:
        return func(*args, fmt="json" if as_json else fmt, **kwargs)

    option = click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(FORMATS),
        default="table",
        show_default=True,
        help="table for people (escaped, fitted to the terminal); json, jsonl, csv exact.",
    )(option(wrapper))  # type: ignore[return-value]


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(func)


def user_options(func: F) -> F:
    """`--db`, `--app` and `--user`: the command gets `db` and `user` (a `UserKey`)."""

    @functools.wraps(func)
    def wrapper(*args: Any, app_name: str, user_id: str, **kwargs: Any) -> Any:
        return func(*args, user=UserKey(app_name, user_id), **kwargs)

    option = click.option(
        "--user", "user_id", required=True, help="User id (exact, case-sensitive)."
    )
    app = click.option(
        "--app", "app_name", default="default", show_default=True, help="Application name."
    )
    return db_option(app(option(wrapper)))  # type: ignore[return-value]


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        exc = validation_problem(exc)
    if isinstance(exc, OSError) and not isinstance(exc, LangmemTrpcError):
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror or type(exc).__name__}{where}"
    return f"{type(exc).__name__}: {exc}"


EXTRAS: dict[str, tuple[str, ...]] = {
    "postgres": ("psycopg", "psycopg_pool", "pgvector"),
    "queue": ("procrastinate", "psycopg", "psycopg_pool"),
    "ui": ("uvicorn", "starlette", "jinja2", "multipart", "python_multipart"),
    "mcp": ("mcp", "mcp_types", "uvicorn"),
    "lancedb": ("lancedb", "pyarrow"),
    "bench": ("bm25s", "matplotlib", "tqdm"),
    "local": ("tokenizers",),
    "openai": ("langchain_openai",),
}
"""Each extra of pyproject.toml and the top-level modules it installs: a missing one
becomes a one-line install hint (`missing_extra`). A module in several extras is
named by the first, unless the running command's own extras (`COMMAND_EXTRAS`) list it."""

COMMAND_EXTRAS: dict[str, tuple[str, ...]] = {
    "ui": ("ui",),
    "mcp": ("mcp",),
    "bench": ("bench",),
    "worker": ("postgres", "queue"),
    "jobs": ("postgres", "queue"),
}
"""The extras a command (by name, at any level) is built on."""


def _missing_module(exc: BaseException) -> str | None:
    """The optional top-level module whose absence caused `exc` (its cause chain
    included: backends wrap the ImportError in a ConfigurationError), or None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ModuleNotFoundError) and current.name:
            if any(current.name in modules for modules in EXTRAS.values()):
                return current.name
        current = current.__cause__ or current.__context__
    return None


def missing_extra(exc: BaseException, commands: Iterable[str] = ()) -> str | None:
    """The install hint for an error caused by a missing optional module, else None.
    `commands`: the names of the running command and its parents (`command_names`)."""
    module = _missing_module(exc)
    if module is None:
        return None
    own = [e for name in commands for e in COMMAND_EXTRAS.get(name, ()) if module in EXTRAS[e]]
    extras = ",".join(own) if own else next(e for e, m in EXTRAS.items() if module in m)
    several = "s" if "," in extras else ""
    return (
        f"missing the [{extras}] extra{several} (module {module!r} is not installed): "
        f"pip install 'langmem-trpc[{extras}]'"
    )


def command_names(ctx: click.Context | None = None) -> list[str]:
    """The names of the running command and its parents (the current context's)."""
    ctx = ctx or click.get_current_context(silent=True)
    names: list[str] = []
    while ctx is not None:
        names.append(ctx.info_name or "")
        if ctx.invoked_subcommand:
            names.append(ctx.invoked_subcommand)
        ctx = ctx.parent
    return names


def _shown(message: str) -> str:
    """One line, escaped: an error may quote user input (ids, paths)."""
    return safe(" ".join(message.split()))


def reports_errors(func: F) -> F:
    """Every error becomes one line on stderr and exit code 1 (only the CLI does this): an
    install hint for a missing extra (`missing_extra`), "unexpected ..." for anything not a
    library, validation or file error (traceback at -vv)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except click.ClickException as exc:
            if type(exc) is not click.ClickException:  # usage errors: click's own
                raise
            raise click.ClickException(_shown(exc.message)) from None
        except (click.Abort, click.exceptions.Exit):  # Ctrl-C at a prompt, ctx.exit(): click's own
            raise
        except Exception as exc:
            raise click.ClickException(_shown(_message(exc))) from None

    return wrapper  # type: ignore[return-value]


def _message(exc: Exception) -> str:
    if (hint := missing_extra(exc, command_names())) is not None:
        return hint
    if isinstance(exc, (LangmemTrpcError, ValidationError, OSError)):
        return _one_line(exc)
    logger.debug("unexpected error", exc_info=True)  # a bug or a third-party failure
    return f"unexpected {_one_line(exc)} (-vv shows the traceback)"


FILE_SCHEMES = ("sqlite", "lancedb")
"""Backends whose --db is a path: a write creates the file (or LanceDB's folder) there,
but not a missing folder above it."""


def _store_path(target: str) -> Path | None:
    """The file or folder a file-based --db names (None for a server or `:memory:`)."""
    scheme = scheme_of(target)
    if scheme not in FILE_SCHEMES:
        return None
    path = split_url(target, scheme) if "://" in target else target
    return None if path in ("", ":memory:") else Path(path).expanduser()


def check_folder(target: str) -> None:
    """Refuse a file-based --db whose folder does not exist: a mistyped path must not
    create folders (`SQLiteMemoryService` itself would create them)."""
    path = _store_path(target)
    if path is not None and not path.parent.is_dir():
        raise ConfigurationError(
            f"--db: folder {str(path.parent)!r} does not exist (nothing was created; "
            "create the folder first or fix the path)"
        )


@contextmanager
def open_service(db: str | None, *, read: bool = False) -> Iterator[MemoryService]:
    """The store --db names (`langmem_trpc.open`), closed on exit; `read=True` (commands that
    only look) opens with `create=False`: nothing is created, migrated or set up.

    A write creates the database, not folders: a given --db (or $LANGMEM_TRPC_DSN) in a
    folder that does not exist is an error (`check_folder`); only the default location
    ($LANGMEM_TRPC_HOME or the user data directory) is created when missing."""
    target = db or default_db()
    if not read and db is None and not os.environ.get("LANGMEM_TRPC_DSN"):
        Path(target).parent.mkdir(parents=True, exist_ok=True)
    elif not read:
        check_folder(target)
    with open_store(target, create=not read, limits=CLI_LIMITS) as service:
        yield service


def is_postgres(target: str | None) -> bool:
    """True when `--db` names a PostgreSQL database (the job queue lives only there)."""
    return target is not None and scheme_of(target) in ("postgresql", "postgres")


def emit(data: Any, as_json: bool, text: Callable[[], str]) -> None:
    """`data` as indented JSON with --json, else `text()` (escape stored text in it with `safe`)."""
    if as_json:
        click.echo(json.dumps(data, ensure_ascii=False, indent=2))
    else:
        click.echo(text())


class RootGroup(click.Group):
    """The `langmem-trpc` group: a missing optional module becomes the one-line install
    hint also in commands without `reports_errors` (bench, demo) and in their imports."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:
            hint = missing_extra(exc, command_names(ctx))
            if hint is None:
                raise
            raise click.ClickException(hint) from None
