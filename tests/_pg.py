"""PostgreSQL helpers the test packages share (fixtures stay in their conftest.py)."""

from __future__ import annotations


def wipe_postgres(url: str) -> None:
    """Empty every langmem table (the schema, its migrations and the recorded settings
    stay), so each test starts from an empty store on a shared database."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
                "AND tablename NOT LIKE '%migration%' AND tablename <> 'langmem_settings'"
            ).fetchall()
        ]
        if tables:
            conn.execute("TRUNCATE " + ", ".join(f'"{t}"' for t in tables))
