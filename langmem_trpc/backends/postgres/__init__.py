"""PostgreSQL + pgvector backend (needs the `[postgres]` extra: psycopg, psycopg-pool, pgvector).

Importing this package without the extra raises a `ConfigurationError`
with the install command, instead of a bare ImportError deep inside.
"""

from __future__ import annotations

from ...errors import ConfigurationError

try:
    import psycopg  # noqa: F401
    import psycopg_pool  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ConfigurationError(
        "PostgresMemoryService needs the postgres extra: pip install 'langmem-trpc[postgres]' "
        f"(missing module: {exc.name})"
    ) from exc

from .service import PostgresMemoryService

__all__ = ["PostgresMemoryService"]
