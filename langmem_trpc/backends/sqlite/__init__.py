"""The embedded default backend: one SQLite file, FTS5 keyword search, numpy vectors."""

from ._sql import MIGRATIONS
from .service import SQLiteMemoryService

__all__ = ["MIGRATIONS", "SQLiteMemoryService"]
