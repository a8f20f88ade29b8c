"""`langmem-trpc info`: a store's backend, schema version, recorded embedder and counts."""

from __future__ import annotations

import click

from ..errors import ConfigurationError
from ..service.info import StoreInfo
from ._common import DB_HELP, emit, json_option, open_service, reports_errors

__all__ = ["info_command"]


def _text(info: StoreInfo) -> str:
    embedder = "none recorded (no embedder has opened it yet)"
    if info.embedder is not None:
        found = info.embedder
        embedder = f"{found.name} ({found.dims} dimensions, generation {found.generation})"
    lines = [
        f"backend:        {info.backend}",
        f"schema version: {info.schema_version}",
        f"embedder:       {embedder}",
        f"users:          {info.users}",
        f"memories:       {info.live} live, {info.deleted} deleted",
    ]
    if info.reembed_target is not None:
        target = info.reembed_target
        lines.append(
            f"re-embed:       in progress to {target.name} ({target.dims} dimensions), "
            f"{info.reembed_done} memories done (run `langmem-trpc reembed` again to finish)"
        )
    return "\n".join(lines)


@click.command(name="info")
@click.option("--db", help=DB_HELP)
@json_option
@reports_errors
def info_command(db: str | None, as_json: bool) -> None:
    """Show a store's backend, schema version, recorded embedder and memory counts.

    Looks only: nothing is created or migrated.

    \b
    Example:
        langmem-trpc info --db memories.db
    """
    with open_service(db, read=True) as service:
        describe = getattr(service, "store_info", None)
        if describe is None:
            raise ConfigurationError(
                f"--db: the {type(service).__name__} backend does not describe itself"
            )
        info: StoreInfo = describe()
        emit(info.as_dict(), as_json, lambda: _text(info))
