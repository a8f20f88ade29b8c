"""`langmem-trpc ui`: the memory inspector in a browser."""

from __future__ import annotations

import click

from ._common import db_option, open_service, reports_errors


@click.command(name="ui")
@db_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Bind address.")
@click.option("--port", default=8765, show_default=True, type=int, help="Port.")
@click.option(
    "--read-only", is_flag=True, help="Hide and refuse every write (edit, delete, purge)."
)
@reports_errors
def ui_command(db: str | None, host: str, port: int, read_only: bool) -> None:
    """Serve the memory inspector: users, memories, search playground, history, fixes.

    Write actions (edit, delete, restore, purge, purge a user) need the token
    printed at start-up; the pages carry it, so use the printed URL. The
    server binds 127.0.0.1 unless --host says otherwise. With --read-only
    no write is possible and the database is opened as for a read command
    (a missing one is an error; nothing is created).

    \b
    Examples:
        langmem-trpc ui --db memories.db
        langmem-trpc ui --db postgresql://localhost/memories --read-only --port 9000
    """
    import uvicorn

    from ..ui import create_app, new_token

    token = new_token()
    with open_service(db, read=read_only) as svc:
        loopback = host in ("127.0.0.1", "localhost", "::1")
        hosts = ["127.0.0.1", "localhost", "::1", "[::1]"] if loopback else None
        app = create_app(svc, token=token, read_only=read_only, allowed_hosts=hosts)
        click.echo(f"langmem-trpc inspector on http://{host}:{port}/")
        if read_only:
            click.echo("read-only: writes are refused")
        else:
            click.echo(f"write token: {token} (sent by the pages' forms; header X-LangMem-Token)")
        uvicorn.run(app, host=host, port=port, log_level="warning")
