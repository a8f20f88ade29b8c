"""The `langmem-trpc` command: a thin shell over the memory service."""

from __future__ import annotations

import logging

import click

from ._common import RootGroup
from .backfill import backfill_command
from .bench import bench
from .info import info_command
from .jobs import jobs
from .mcp import mcp_command
from .memories import memories
from .reembed import reembed_command
from .transfer import export_memories, import_memories
from .ui import ui_command
from .worker import worker_command

__all__ = ["cli", "main"]


@click.group(cls=RootGroup)
@click.version_option(package_name="langmem-trpc")
@click.option("-v", "--verbose", count=True, help="Log more (-v info, -vv debug).")
def cli(verbose: int) -> None:
    """Long-term memory for LangGraph agents: inspect, edit, move and benchmark it.

    A command that needs an extra which is not installed (ui, mcp, worker, a
    postgresql:// or lancedb:// --db, bench) says which, in one line:
    pip install 'langmem-trpc[EXTRA]'.
    """
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


@cli.command(name="demo")
@click.option(
    "--db",
    help="SQLite file for the demo (default: langmem-demo.db in $LANGMEM_TRPC_HOME, else in "
    "the user data directory; never your memories.db). The demo resets its own user there.",
)
def demo(db: str | None) -> None:
    """Run a two-thread agent conversation through the real hook, worker, store and preload.

    Offline (no API key) it uses a scripted model and says so.

    \b
    Example:
        langmem-trpc demo --db /tmp/demo.db
    """
    from .demo import run_demo_command

    run_demo_command(db, out=click.echo)


for command in (memories, export_memories, import_memories, jobs, worker_command, bench):
    cli.add_command(command)
cli.add_command(backfill_command)
cli.add_command(mcp_command)
cli.add_command(ui_command)
cli.add_command(reembed_command)
cli.add_command(info_command)


def main() -> None:
    cli()
