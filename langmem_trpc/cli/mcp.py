"""`langmem-trpc mcp`: serve one user's memory to MCP clients (Claude Desktop, Cursor, ...)."""

from __future__ import annotations

import click

from ..errors import ConfigurationError
from ._common import db_option, open_service, reports_errors
from .ui import MIN_TOKEN_CHARS, is_loopback, require_extra

TOKEN_ENV = "LANGMEM_TRPC_MCP_TOKEN"


def check_http_token(host: str, token: str | None) -> None:
    """Off loopback the HTTP server needs an operator-chosen bearer token (16+ characters)."""
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise ConfigurationError(f"--token: use at least {MIN_TOKEN_CHARS} characters")
    if token is None and not is_loopback(host):
        raise ConfigurationError(
            f"--host {host} is not a loopback address: set a bearer token with --token or "
            f"${TOKEN_ENV} (see docs/mcp.md, 'Serving beyond loopback')"
        )


@click.command(name="mcp")
@db_option
@click.option("--app", "app_name", default="default", show_default=True, help="Application name.")
@click.option(
    "--user", "user_id", required=True, help="The one user every tool call acts for (fixed)."
)
@click.option(
    "--allow-writes",
    is_flag=True,
    help="Also serve memory_add, memory_update and memory_delete (default: search and load only).",
)
@click.option(
    "--http", "http", is_flag=True, help="Serve streamable HTTP instead of stdio (at /mcp)."
)
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP bind address.")
@click.option("--port", default=8766, show_default=True, type=int, help="HTTP port.")
@click.option(
    "--token",
    envvar=TOKEN_ENV,
    help=f"HTTP: require Authorization: Bearer TOKEN (16+ characters; ${TOKEN_ENV}). "
    "Required when --host is not loopback.",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="HTTP: also serve requests whose Host header is NAME (repeatable); others get 421.",
)
@reports_errors
def mcp_command(
    db: str | None,
    app_name: str,
    user_id: str,
    allow_writes: bool,
    http: bool,
    host: str,
    port: int,
    token: str | None,
    allowed_hosts: tuple[str, ...],
) -> None:
    """Serve the memory tools over MCP (stdio by default) for one fixed --app/--user.

    Tools: memory_search, memory_load; with --allow-writes also memory_add,
    memory_update, memory_delete. Same arguments, results and error messages
    as the agent tools. The identity comes from --app/--user, never from tool
    arguments. Without --allow-writes the database is opened as for a read
    command: a missing one is an error and nothing is created. Over HTTP only
    Host headers naming loopback, the bind address or an --allowed-host are
    served; binding anything but loopback needs --token.

    \b
    Examples:
        langmem-trpc mcp --db memories.db --app support --user alice
        langmem-trpc mcp --db memories.db --user alice --allow-writes --http --port 8766
    """
    require_extra("mcp", "mcp", *(("uvicorn",) if http else ()))
    if http:
        check_http_token(host, token)
    import anyio

    from ..integration._mcp_wire import http_app, serve_stdio
    from ..integration.mcp_server import build_mcp_server
    from ..types import UserKey

    UserKey(app_name, user_id)  # a bad identity is a one-line error before serving
    with open_service(db, read=not allow_writes) as svc:
        server = build_mcp_server(
            svc, app_name=app_name, user_id=user_id, allow_writes=allow_writes
        )
        if http:
            import uvicorn

            app = http_app(server, host=host, allowed_hosts=allowed_hosts, token=token)
            click.echo(f"MCP streamable HTTP on http://{host}:{port}/mcp", err=True)
            uvicorn.run(app, host=host, port=port, log_level="warning")
        else:
            anyio.run(serve_stdio, server)
