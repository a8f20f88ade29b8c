"""`langmem-trpc mcp`: a real MCP client session (the SDK's stdio client) against the CLI server."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the [mcp] extra is not installed")

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from langmem_trpc import UserKey
from langmem_trpc.backends.sqlite import SQLiteMemoryService
from langmem_trpc.integration.mcp_server import call_memory_tool
from langmem_trpc.integration.tools import create_memory_tools

ROOT = Path(__file__).resolve().parents[2]
REQUEST_TIMEOUT = 60.0  # every MCP request (initialize included) is bounded
ALICE = UserKey("support", "alice")
BOB = UserKey("support", "bob")


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = str(tmp_path / "m.db")
    with SQLiteMemoryService(path) as svc:
        svc.add(ALICE, "Alice likes green tea", topics=["drinks"])
        svc.add(BOB, "Bob likes green tea too")
    return path


@asynccontextmanager
async def session(db: str, *extra: str) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "langmem_trpc.cli", "mcp", "--db", db, "--app", "support", "--user", "alice"]
        + list(extra),
        env={"PYTHONPATH": str(ROOT)},
        cwd=str(ROOT),
    )
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, read_timeout_seconds=REQUEST_TIMEOUT) as client,
    ):
        await client.initialize()
        yield client


def _text(result: Any) -> str:
    return "".join(block.text for block in result.content)


async def test_read_only_server_lists_read_tools_and_searches_its_user_only(db: str) -> None:
    async with session(db) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert sorted(tools) == ["memory_load", "memory_search"]
        assert tools["memory_search"].input_schema["required"] == ["query"]
        assert "user_id" not in tools["memory_search"].input_schema["properties"]
        result = await client.call_tool("memory_search", {"query": "green tea"})
        assert not result.is_error
        payload = json.loads(_text(result))
        assert [r["memory"] for r in payload["results"]] == ["Alice likes green tea"]
        # identity never comes from arguments: a user_id argument changes nothing
        sneaky = await client.call_tool(
            "memory_search", {"query": "green tea", "user_id": "bob", "app_name": "support"}
        )
        assert [r["memory"] for r in json.loads(_text(sneaky))["results"]] == [
            "Alice likes green tea"
        ]
        refused = await client.call_tool("memory_add", {"memory": "Alice is evil"})
        assert refused.is_error and "--allow-writes" in _text(refused)
    with SQLiteMemoryService(db) as svc:
        assert [e.text for e in svc.read(ALICE)] == ["Alice likes green tea"]


async def test_write_tools_round_trip_into_the_database(db: str) -> None:
    async with session(db, "--allow-writes") as client:
        names = sorted(t.name for t in (await client.list_tools()).tools)
        assert names == sorted(
            ["memory_search", "memory_load", "memory_add", "memory_update", "memory_delete"]
        )
        added = json.loads(
            _text(await client.call_tool("memory_add", {"memory": "Alice owns a cat"}))
        )
        memory_id = added["memory_id"]
        updated = await client.call_tool(
            "memory_update", {"memory_id": memory_id, "memory": "Alice owns two cats"}
        )
        assert not updated.is_error
        with SQLiteMemoryService(db) as svc:
            entry = svc.get(ALICE, memory_id)
            assert entry is not None and entry.text == "Alice owns two cats"
            assert svc.get(BOB, memory_id) is None
            assert [h.source.thread_id for h in svc.history(ALICE, memory_id) if h.source] == [
                "mcp",
                "mcp",
            ]
        deleted = await client.call_tool("memory_delete", {"memory_id": memory_id})
        assert not deleted.is_error
        loaded = json.loads(_text(await client.call_tool("memory_load", {"limit": 5})))
        assert [r["memory"] for r in loaded["results"]] == ["Alice likes green tea"]


async def test_errors_render_exactly_like_the_langchain_tools(db: str, tmp_path: Path) -> None:
    calls = [
        ("memory_update", {"memory_id": "nope", "memory": "x"}),
        ("memory_delete", {"memory_id": "nope"}),
        ("memory_search", {"query": "tea", "limit": 0}),
        ("memory_search", {"query": "tea", "time_after": "someday"}),
        ("memory_add", {"memory": "   "}),
    ]
    with SQLiteMemoryService(str(tmp_path / "ref.db")) as ref:
        tools = {t.name: t for t in create_memory_tools(ref, include=[c[0] for c in calls[:3]])}
        tools["memory_add"] = create_memory_tools(ref, include=["memory_add"])[0]
        expected = [await call_memory_tool(tools[name], args, ALICE) for name, args in calls]
    async with session(db, "--allow-writes") as client:
        for (name, args), (text, is_error) in zip(calls, expected, strict=True):
            result = await client.call_tool(name, args)
            assert is_error and result.is_error, name
            assert _text(result) == text
    assert "memory 'nope' not found" in expected[0][0]
    assert "invalid arguments (limit)" in expected[2][0]
    assert "invalid time range: time_after" in expected[3][0]


async def _http_session(url: str, deadline: float) -> tuple[list[str], Any]:
    import anyio
    from mcp.client.streamable_http import streamable_http_client

    while True:  # the banner is printed just before uvicorn binds
        try:
            with anyio.fail_after(max(1.0, deadline - time.monotonic())):
                async with (
                    streamable_http_client(url) as (read, write),
                    ClientSession(read, write, read_timeout_seconds=REQUEST_TIMEOUT) as client,
                ):
                    await client.initialize()
                    names = sorted(t.name for t in (await client.list_tools()).tools)
                    return names, await client.call_tool("memory_search", {"query": "green tea"})
        except Exception:
            if time.monotonic() > deadline:
                raise
            await anyio.sleep(0.1)


def test_streamable_http_flag_serves_the_same_tools(db: str, tmp_path: Path) -> None:
    import subprocess

    import anyio

    from langmem_trpc.ui.serving import free_port, stop_process

    port = free_port()
    args = ["mcp", "--db", db, "--app", "support", "--user", "alice", "--http", "--port", str(port)]
    log = tmp_path / "server.log"  # a file, not a pipe: the server's output can never block it
    with log.open("w") as errors:
        proc = subprocess.Popen(
            [sys.executable, "-m", "langmem_trpc.cli", *args],
            cwd=ROOT,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
            stdout=subprocess.DEVNULL,
            stderr=errors,
        )
    try:
        deadline = time.monotonic() + 60
        while "/mcp" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "no banner from the HTTP MCP server"
            time.sleep(0.05)
        names, result = anyio.run(_http_session, f"http://127.0.0.1:{port}/mcp", deadline)
        assert names == ["memory_load", "memory_search"]
        assert [r["memory"] for r in json.loads(_text(result))["results"]] == [
            "Alice likes green tea"
        ]
    finally:
        stop_process(proc)


def test_identity_comes_from_the_authenticated_client_when_the_transport_has_one() -> None:
    from mcp.server.auth.middleware.auth_context import auth_context_var
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import AccessToken

    from langmem_trpc.integration.mcp_server import mcp_identity

    assert mcp_identity("support", "alice") == ALICE
    assert mcp_identity("support", None) is None
    token = AccessToken(token="t", client_id="cursor-app", scopes=[], subject="carol")
    reset = auth_context_var.set(AuthenticatedUser(token))
    try:
        assert mcp_identity("support", "alice") == UserKey("support", "carol")
        no_subject = AccessToken(token="t", client_id="cursor-app", scopes=[])
        auth_context_var.set(AuthenticatedUser(no_subject))
        assert mcp_identity("support", None) == UserKey("support", "cursor-app")
    finally:
        auth_context_var.reset(reset)


async def test_no_identity_is_the_tools_own_error(tmp_path: Path) -> None:
    with SQLiteMemoryService(str(tmp_path / "m.db")) as svc:
        tool = create_memory_tools(svc, include=["memory_search"])[0]
        text, is_error = await call_memory_tool(tool, {"query": "tea"}, None)
    assert is_error and "no user identity" in text


async def test_the_server_releases_the_postgres_async_pool_when_it_stops(pg_url: str) -> None:
    # The pool is bound to the server's loop and psycopg_pool's maintenance tasks
    # survive cancellation: left open, it could hang that loop's shutdown.
    import anyio
    from mcp import Client

    from langmem_trpc.backends.postgres import PostgresMemoryService
    from langmem_trpc.integration.mcp_server import build_mcp_server

    with PostgresMemoryService(pg_url) as svc:
        svc.setup()
        svc.add(ALICE, "Alice likes green tea")
        server = build_mcp_server(svc, app_name="support", user_id="alice")
        with anyio.fail_after(REQUEST_TIMEOUT):
            async with Client(server) as client:
                found = await client.call_tool("memory_search", {"query": "green tea"})
                assert "Alice likes green tea" in _text(found)
                pool = svc._async_pool  # type: ignore[attr-defined]
                assert pool is not None and not pool.closed
        assert pool.closed
        assert [e.text for e in await svc.aread(ALICE)] == ["Alice likes green tea"]  # usable
