"""`langmem-trpc ui` as a user runs it: a real server process, its printed URL and token."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the [ui] extra is not installed")

import httpx
from click.testing import CliRunner

from langmem_trpc import UserKey
from langmem_trpc.backends.sqlite import SQLiteMemoryService
from langmem_trpc.cli import cli
from langmem_trpc.ui.serving import free_port, read_line, stop_process

ROOT = Path(__file__).resolve().parents[2]
ALICE = UserKey("support", "alice")


def _start(*args: str, **env: str) -> tuple[subprocess.Popen[str], list[str]]:
    """The `ui` process and its first three lines (bounded waits; stopped if they never come)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "langmem_trpc.cli", "ui", *args],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    try:
        lines = [read_line(proc.stdout, 60).strip() for _ in range(3)]
    except BaseException:
        stop_process(proc)
        raise
    return proc, lines


def _wait(url: str) -> httpx.Response:
    deadline = time.monotonic() + 20
    while True:
        try:
            return httpx.get(url, timeout=10)
        except httpx.ConnectError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_ui_prints_url_and_token_and_the_token_guards_writes(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    with SQLiteMemoryService(db) as svc:
        memory_id = svc.add(ALICE, "Alice likes tea").id
    port = free_port()
    proc, lines = _start("--db", db, "--port", str(port))
    try:
        base = f"http://127.0.0.1:{port}"
        assert lines[0] == f"langmem-trpc inspector on {base}/"
        link, token = lines[1].split()[2], lines[2].split()[2]
        assert link == f"{base}/login?token={token}"
        assert _wait(base + "/").status_code == 303  # to the login page
        with httpx.Client() as browser:  # the printed link logs in with one click
            assert browser.get(link, follow_redirects=True).status_code == 200
            assert browser.get(base + "/").status_code == 200
        auth = {"X-LangMem-Token": token}
        assert httpx.get(base + "/", headers={"Host": "evil.example", **auth}).status_code == 400
        edit = f"{base}/memory/edit?app=support&user=alice&id={memory_id}"
        assert httpx.post(edit, data={"text": "x", "token": token}).status_code == 403
        assert (
            httpx.post(edit, data={"text": "Alice likes coffee"}, headers=auth).status_code == 303
        )
    finally:
        stop_process(proc)
    with SQLiteMemoryService(db) as svc:
        assert svc.get(ALICE, memory_id).text == "Alice likes coffee"


def test_read_only_ui_on_a_missing_database_is_one_line_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "m.db"
    result = CliRunner().invoke(cli, ["ui", "--db", str(missing), "--read-only"])
    assert result.exit_code == 1
    assert "no memory database" in result.output and len(result.output.strip().splitlines()) == 1
    assert not missing.parent.exists()


def test_a_non_loopback_bind_needs_an_explicit_token(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    for args in (["--host", "0.0.0.0"], ["--host", "192.0.2.1"]):
        result = CliRunner().invoke(cli, ["ui", "--db", db, *args])
        assert result.exit_code == 1 and "--token" in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1
    short = CliRunner().invoke(cli, ["ui", "--db", db, "--host", "0.0.0.0", "--token", "abc"])
    assert short.exit_code == 1 and "at least 16 characters" in short.output


def test_a_wildcard_bind_still_checks_the_host_header(tmp_path: Path) -> None:
    # `--host 0.0.0.0` (a container) once served any Host header: DNS rebinding.
    db = str(tmp_path / "m.db")
    with SQLiteMemoryService(db) as svc:
        svc.add(ALICE, "Alice likes tea")
    port = free_port()
    token = "operator-chosen-token-123"
    proc, lines = _start(
        "--db",
        db,
        "--host",
        "0.0.0.0",
        "--port",
        str(port),
        "--allowed-host",
        "mem.internal",
        LANGMEM_TRPC_UI_TOKEN=token,
    )
    try:
        assert token not in "".join(lines)  # an operator's token is never printed
        base = f"http://127.0.0.1:{port}"
        auth = {"X-LangMem-Token": token}
        assert _wait(base + "/").status_code == 303
        assert httpx.get(base + "/", headers=auth).status_code == 200
        for host, status in (("rebind.attacker.example", 400), ("mem.internal", 200)):
            answer = httpx.get(base + "/", headers={"Host": f"{host}:{port}", **auth})
            assert answer.status_code == status, host
        assert httpx.get(base + "/", headers={"X-LangMem-Token": "wrong" * 4}).status_code == 303
    finally:
        stop_process(proc)


def test_ui_without_its_extra_is_a_one_line_install_hint(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn", None)
    result = CliRunner().invoke(cli, ["ui", "--db", str(tmp_path / "m.db")])
    assert result.exit_code == 1
    assert "pip install 'langmem-trpc[ui]'" in result.output and "unexpected" not in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "m.db").exists()


def test_the_nav_bar_location_names_the_store_without_credentials() -> None:
    from langmem_trpc.cli.ui import describe_db

    assert describe_db("m.db") == "SQLite file m.db"
    url = describe_db("postgresql://bob:s3cret@db.internal:5432/memories")
    assert url == "PostgreSQL database memories on db.internal" and "s3cret" not in url
    libpq = describe_db("host=db.internal dbname=memories user=bob password=s3cret")
    assert libpq == "PostgreSQL database memories on db.internal"
    assert describe_db("memory://") == "in memory: nothing is saved"
