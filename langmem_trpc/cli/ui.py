"""`langmem-trpc ui`: the memory inspector in a browser."""

from __future__ import annotations

import importlib.util
import ipaddress
import re
import sys
from urllib.parse import urlsplit

import click

from ..errors import ConfigurationError
from ..registry import scheme_of
from ._common import db_option, default_db, open_service, reports_errors

TOKEN_ENV = "LANGMEM_TRPC_UI_TOKEN"
MIN_TOKEN_CHARS = 16


def _importable(module: str) -> bool:
    if module in sys.modules:
        return sys.modules[module] is not None  # None: an import of it is blocked
    return importlib.util.find_spec(module) is not None


def require_extra(extra: str, *modules: str) -> None:
    """A one-line install hint, before any work, when an extra's module is missing."""
    missing = [m for m in modules if not _importable(m)]
    if missing:
        raise ConfigurationError(
            f"this command needs the [{extra}] extra ({', '.join(missing)} is not installed):"
            f" pip install 'langmem-trpc[{extra}]'"
        )


def describe_db(db: str) -> str:
    """Where the memories live, in words, without credentials (for the nav bar)."""
    scheme = scheme_of(db)
    if scheme in ("postgresql", "postgres"):
        if "://" in db:
            parts = urlsplit(db)
            name, host = parts.path.lstrip("/") or "(default)", parts.hostname or "local socket"
        else:
            fields = dict(re.findall(r"(\w+)\s*=\s*'?([^'\s]*)'?", db))
            name, host = fields.get("dbname", "(default)"), fields.get("host", "local socket")
        return f"PostgreSQL database {name} on {host}"
    if scheme == "memory":
        return "in memory: nothing is saved"
    path = db.split("://", 1)[1] if "://" in db else db
    kind = "LanceDB directory" if scheme == "lancedb" else "SQLite file"
    return f"{kind} {path}"


def serving_hosts(host: str, extra: tuple[str, ...]) -> list[str]:
    """The Host headers served: the loopback names, the bind address (unless a
    wildcard), and every `--allowed-host`."""
    from ..ui import LOOPBACK_NAMES

    bound = [] if host in ("0.0.0.0", "::", "") else [host, f"[{host}]" if ":" in host else host]
    return list(dict.fromkeys([*LOOPBACK_NAMES, *bound, *extra]))


def is_loopback(host: str) -> bool:
    """True for `localhost` and loopback IP literals (127.0.0.0/8, ::1)."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_token(host: str, token: str | None) -> None:
    """A non-loopback bind needs an operator-chosen token of at least 16 characters."""
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise ConfigurationError(f"--token: use at least {MIN_TOKEN_CHARS} characters")
    if token is None and not is_loopback(host):
        raise ConfigurationError(
            f"--host {host} is not a loopback address: set a token with --token or "
            f"${TOKEN_ENV} (see docs/operating.md, 'Exposing the inspector')"
        )


@click.command(name="ui")
@db_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Bind address.")
@click.option("--port", default=8765, show_default=True, type=int, help="Port.")
@click.option(
    "--read-only", is_flag=True, help="Hide and refuse every write (edit, delete, purge)."
)
@click.option(
    "--token",
    envvar=TOKEN_ENV,
    help=f"The login token (at least {MIN_TOKEN_CHARS} characters; ${TOKEN_ENV}). "
    "Required when --host is not loopback; default: a fresh one, printed.",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="Also serve requests whose Host header is NAME (repeatable): the name the "
    "browser uses, e.g. memories.internal. Others get 400 (DNS rebinding).",
)
@click.option(
    "--max-body",
    default=256 * 1024,
    show_default=True,
    type=click.IntRange(min=1024),
    help="Largest request body in bytes; a larger one is refused with 413.",
)
@reports_errors
def ui_command(
    db: str | None,
    host: str,
    port: int,
    read_only: bool,
    token: str | None,
    allowed_hosts: tuple[str, ...],
    max_body: int,
) -> None:
    """Serve the memory inspector: users, memories, search playground, history, fixes.

    Every page needs a login with the token (a session cookie, HttpOnly and
    SameSite=Strict); scripts may send it as X-LangMem-Token or
    Authorization: Bearer instead. Pages never carry the token. Only Host
    headers naming a loopback address, the bind address or an --allowed-host
    are served. Binding anything but loopback needs --token (or its
    environment variable). With --read-only no write is possible and the
    database is opened as for a read command (a missing one is an error;
    nothing is created).

    \b
    Examples:
        langmem-trpc ui --db memories.db
        LANGMEM_TRPC_UI_TOKEN=... langmem-trpc ui --host 0.0.0.0 --allowed-host mem.internal
    """
    require_extra("ui", "uvicorn", "starlette", "jinja2", "multipart")
    check_token(host, token)
    import uvicorn

    from ..ui import create_app, new_token

    hosts = serving_hosts(host, allowed_hosts)
    with open_service(db, read=read_only) as svc:
        app = create_app(
            svc,
            token=token or new_token(),
            read_only=read_only,
            allowed_hosts=hosts,
            max_body_bytes=max_body,
            location=describe_db(db or default_db()),
        )
        click.echo(f"langmem-trpc inspector on http://{host}:{port}/")
        if token is None:
            click.echo(f"log in: http://{host}:{port}/login?token={app.state.token}")
            click.echo(f"login token: {app.state.token} (or paste it on the login page)")
        else:
            click.echo("login token: the one you set (--token / $" + TOKEN_ENV + ")")
        click.echo(f"serving Host headers: {', '.join(hosts)}" + (" (read-only)" * read_only))
        uvicorn.run(app, host=host, port=port, log_level="warning")
