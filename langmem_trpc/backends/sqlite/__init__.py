"""The embedded default backend: one SQLite file, FTS5 keyword search, numpy vectors."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import ConfigurationError
from ...registry import build_service, split_url
from ._connection import probe
from ._sql import MIGRATIONS
from .service import SQLiteMemoryService

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

__all__ = ["MIGRATIONS", "SQLiteMemoryService", "open_backend"]


def open_backend(
    url: str, *, embeddings: Embeddings | None = None, create: bool = True, **options: Any
) -> SQLiteMemoryService:
    """The `sqlite` entry point: `sqlite:///abs/path.db`, `sqlite://relative.db` or
    `sqlite://:memory:`; `options` are `SQLiteMemoryService`'s. With `create=False` the
    file must already be a langmem-trpc database (looked at read-only, nothing created).
    """
    path = split_url(url, "sqlite")
    if not path:
        raise ConfigurationError(f"url: {url!r} names no SQLite file (sqlite:///abs/path.db)")
    state = "langmem" if create or path == ":memory:" else probe(path)
    if state == "missing":
        raise ConfigurationError(
            f"no memory database at {path} (a read creates nothing; check --db or "
            "$LANGMEM_TRPC_HOME)"
        )
    if state == "foreign":
        raise ConfigurationError(
            f"{path} is not a langmem-trpc database (no langmem tables); it was opened "
            "read-only and left unchanged"
        )
    return build_service(SQLiteMemoryService, "sqlite", path, embeddings, **options)
