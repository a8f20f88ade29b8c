"""PostgreSQL + pgvector backend (needs the `[postgres]` extra: psycopg, psycopg-pool, pgvector).

Importing this package without the extra raises a `ConfigurationError`
with the install command, instead of a bare ImportError deep inside.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import ConfigurationError

try:
    import psycopg  # noqa: F401
    import psycopg_pool  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ConfigurationError(
        "PostgresMemoryService needs the postgres extra: pip install 'langmem-trpc[postgres]' "
        f"(missing module: {exc.name})"
    ) from exc

from ...registry import build_service
from ._claims import read_cursor
from ._conninfo import checked_conninfo
from .service import PostgresMemoryService

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

__all__ = ["PostgresMemoryService", "checked_conninfo", "open_backend", "read_cursor"]


def open_backend(
    url: str, *, embeddings: Embeddings | None = None, create: bool = True, **options: Any
) -> PostgresMemoryService:
    """The `postgresql` / `postgres` entry point: a `postgresql://` URL or a libpq
    `key=value` string, passed to libpq unchanged; `options` are `PostgresMemoryService`'s.
    Opening connects to nothing (pools open on first use): `create=False` needs no check."""
    del create  # nothing is created before setup()
    return build_service(PostgresMemoryService, "postgresql", url, embeddings, **options)
