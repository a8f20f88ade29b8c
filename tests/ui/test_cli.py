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


def _start(*args: str) -> tuple[subprocess.Popen[str], list[str]]:
    """The `ui` process and its first two lines (bounded waits; stopped if they never come)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "langmem_trpc.cli", "ui", *args],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    try:
        lines = [read_line(proc.stdout, 60).strip(), read_line(proc.stdout, 60).strip()]
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
        token = lines[1].split()[2]
        assert _wait(base + "/").status_code == 200
        assert httpx.get(base + "/", headers={"Host": "evil.example"}).status_code == 400
        edit = f"{base}/memory/edit?app=support&user=alice&id={memory_id}"
        assert httpx.post(edit, data={"text": "x"}).status_code == 403
        assert (
            httpx.post(edit, data={"text": "Alice likes coffee", "token": token}).status_code == 303
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
