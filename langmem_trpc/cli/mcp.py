"""`langmem-trpc mcp`: serve one user's memory to MCP clients (Claude Desktop, Cursor, ...)."""

from __future__ import annotations

from typing import Any

import click

from ._common import db_option, open_service, reports_errors


async def _serve_stdio(server: Any) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


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
@reports_errors
def mcp_command(
    db: str | None,
    app_name: str,
    user_id: str,
    allow_writes: bool,
    http: bool,
    host: str,
    port: int,
) -> None:
    """Serve the memory tools over MCP (stdio by default) for one fixed --app/--user.

    Tools: memory_search, memory_load; with --allow-writes also memory_add,
    memory_update, memory_delete. Same arguments, results and error messages
    as the agent tools. The identity comes from --app/--user, never from tool
    arguments. Without --allow-writes the database is opened as for a read
    command: a missing one is an error and nothing is created.

    \b
    Examples:
        langmem-trpc mcp --db memories.db --app support --user alice
        langmem-trpc mcp --db memories.db --user alice --allow-writes --http --port 8766
    """
    import anyio

    from ..integration.mcp_server import build_mcp_server
    from ..types import UserKey

    UserKey(app_name, user_id)  # a bad identity is a one-line error before serving
    with open_service(db, read=not allow_writes) as svc:
        server = build_mcp_server(
            svc, app_name=app_name, user_id=user_id, allow_writes=allow_writes
        )
        if http:
            import uvicorn

            app = server.streamable_http_app(host=host)
            click.echo(f"MCP streamable HTTP on http://{host}:{port}/mcp", err=True)
            uvicorn.run(app, host=host, port=port, log_level="warning")
        else:
            anyio.run(_serve_stdio, server)
