"""`langmem-trpc mcp`: a real MCP client session (the SDK's stdio client) against the CLI server."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
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
    assert "invalid arguments (limit: input should be greater than or equal to 1)" in expected[2][0]
    assert "invalid time range: time_after" in expected[3][0]


async def _http_session(
    url: str, deadline: float, headers: dict[str, str] | None = None
) -> tuple[list[str], Any]:
    import anyio
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    while True:  # the banner is printed just before uvicorn binds
        try:
            with anyio.fail_after(max(1.0, deadline - time.monotonic())):
                async with (
                    httpx2.AsyncClient(headers=headers or {}, timeout=30) as http,
                    streamable_http_client(url, http_client=http) as (read, write),
                    ClientSession(read, write, read_timeout_seconds=REQUEST_TIMEOUT) as client,
                ):
                    await client.initialize()
                    names = sorted(t.name for t in (await client.list_tools()).tools)
                    return names, await client.call_tool("memory_search", {"query": "green tea"})
        except Exception:
            if time.monotonic() > deadline:
                raise
            await anyio.sleep(0.1)


@contextmanager
def http_server(db: str, tmp_path: Path, *extra: str, **env: str) -> Iterator[tuple[int, float]]:
    """`mcp --http` in a child process: (its port, a deadline), stopped on exit."""
    import subprocess

    from langmem_trpc.ui.serving import free_port, stop_process

    port = free_port()
    args = ["mcp", "--db", db, "--app", "support", "--user", "alice", "--http", "--port", str(port)]
    log = tmp_path / "server.log"  # a file, not a pipe: the server's output can never block it
    with log.open("w") as errors:
        proc = subprocess.Popen(
            [sys.executable, "-m", "langmem_trpc.cli", *args, *extra],
            cwd=ROOT,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", **env},
            stdout=subprocess.DEVNULL,
            stderr=errors,
        )
    try:
        deadline = time.monotonic() + 60
        while "/mcp" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "no banner from the HTTP MCP server"
            time.sleep(0.05)
        yield port, deadline
    finally:
        stop_process(proc)


def test_streamable_http_flag_serves_the_same_tools(db: str, tmp_path: Path) -> None:
    import anyio

    with http_server(db, tmp_path) as (port, deadline):
        names, result = anyio.run(_http_session, f"http://127.0.0.1:{port}/mcp", deadline)
        assert names == ["memory_load", "memory_search"]
        assert [r["memory"] for r in json.loads(_text(result))["results"]] == [
            "Alice likes green tea"
        ]


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


# -- issue #31 (rebinding, token, depth) and #30 (consistent results, hints, schemas) ------


async def test_tools_carry_annotations_and_output_schemas_and_ids_match(db: str) -> None:
    async with session(db, "--allow-writes") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        search, delete = tools["memory_search"].annotations, tools["memory_delete"].annotations
        assert search.read_only_hint and search.idempotent_hint and not search.destructive_hint
        assert delete.destructive_hint and not delete.read_only_hint
        assert tools["memory_add"].annotations.read_only_hint is False
        for tool in tools.values():
            assert tool.output_schema["type"] == "object" and "id" in str(tool.output_schema)
        added = await client.call_tool("memory_add", {"memory": "Alice owns a cat"})
        assert added.structured_content == json.loads(_text(added))
        new_id = added.structured_content["id"]
        assert added.structured_content["memory_id"] == new_id  # the compatible alias
        found = await client.call_tool("memory_search", {"query": "cat"})
        assert new_id in [r["id"] for r in found.structured_content["results"]]
        deleted = await client.call_tool("memory_delete", {"memory_id": new_id})
        assert deleted.structured_content["id"] == new_id


async def test_load_rejects_a_bad_limit_as_search_does(db: str) -> None:
    async with session(db) as client:
        for limit in (0, -3, 51, "many"):
            load = await client.call_tool("memory_load", {"limit": limit})
            search = await client.call_tool("memory_search", {"query": "tea", "limit": limit})
            assert load.is_error and search.is_error, limit
            assert "invalid arguments (limit: " in _text(load)
            assert _text(load).split("(", 1)[1] == _text(search).split("(", 1)[1]


async def test_an_argument_error_says_missing_or_wrong_type(db: str) -> None:
    async with session(db) as client:
        missing = _text(await client.call_tool("memory_search", {}))
        wrong = _text(await client.call_tool("memory_search", {"query": 42}))
    assert "invalid arguments (query: missing)" in missing
    assert "invalid arguments (query: input should be a valid string)" in wrong


def _nested(depth: int) -> Any:
    value: Any = "tea"
    for _ in range(depth):
        value = [value]
    return value


async def test_a_deeply_nested_argument_gets_an_error_not_silence(db: str) -> None:
    # 199 levels once made the SDK's parser drop the message: the client waited its timeout.
    import anyio

    async with session(db) as client:
        for depth in (40, 199, 250):
            with anyio.fail_after(20):
                result = await client.call_tool("memory_search", {"query": _nested(depth)})
            assert result.is_error and "query: nested deeper than 32 levels" in _text(result)
        fine = await client.call_tool("memory_search", {"query": "green tea"})
        assert not fine.is_error  # the session goes on


def test_a_raw_message_nested_thousands_deep_is_answered(db: str) -> None:
    # Deeper than the official client can even send: written to the server's stdin by hand.
    import subprocess

    from langmem_trpc.ui.serving import read_line, stop_process

    args = ["mcp", "--db", db, "--app", "support", "--user", "alice"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "langmem_trpc.cli", *args],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        hello = {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        }
        messages = [
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
        ]
        proc.stdin.write("".join(json.dumps(m) + "\n" for m in messages))
        proc.stdin.flush()
        assert json.loads(read_line(proc.stdout, 60))["id"] == 1
        deep = "[" * 5000 + '"tea"' + "]" * 5000
        call = '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"memory_search","arguments":{"query":%s}}}'
        proc.stdin.write(call % deep + "\n")
        proc.stdin.flush()
        reply = json.loads(read_line(proc.stdout, 30))
        assert reply["id"] == 2 and reply["result"]["isError"]
        assert "nested deeper than 32 levels" in reply["result"]["content"][0]["text"]
    finally:
        stop_process(proc)


def test_http_off_loopback_needs_a_token(db: str) -> None:
    from click.testing import CliRunner

    from langmem_trpc.cli import cli

    base = ["mcp", "--db", db, "--user", "alice", "--http"]
    for host in ("0.0.0.0", "127.0.0.2.nip.io", "10.0.0.1"):
        result = CliRunner().invoke(cli, [*base, "--host", host])
        assert result.exit_code == 1 and "--token" in result.output, host


def test_http_checks_the_host_header_and_the_bearer_token_off_loopback(
    db: str, tmp_path: Path
) -> None:
    # `--host 0.0.0.0` once turned the SDK's rebinding protection off: a rebinding page
    # read the user's memories. Now the Host check stays on and a token is required.
    import anyio
    import httpx

    token = "an-operator-chosen-token"
    extra = ("--host", "0.0.0.0", "--allowed-host", "mem.internal")
    with http_server(db, tmp_path, *extra, LANGMEM_TRPC_MCP_TOKEN=token) as (port, deadline):
        url = f"http://127.0.0.1:{port}/mcp"
        auth = {"Authorization": f"Bearer {token}"}
        names, result = anyio.run(_http_session, url, deadline, auth)
        assert names == ["memory_load", "memory_search"] and not result.is_error
        hello = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
        accept = {
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        }
        for headers, status in (
            ({}, 401),
            ({"Authorization": "Bearer wrong-token-wrong-token"}, 401),
            ({**auth, "Host": f"rebind.attacker.example:{port}"}, 421),
            ({**auth, "Host": f"127.0.0.2:{port}"}, 421),
            ({**auth, "Origin": "http://rebind.attacker.example"}, 403),
            ({**auth, "Host": f"mem.internal:{port}"}, 200),
        ):
            answer = httpx.post(url, json=hello, headers={**accept, **headers}, timeout=30)
            assert answer.status_code == status, (headers, answer.text[:200])


def test_mcp_without_its_extra_is_a_one_line_install_hint(monkeypatch, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from langmem_trpc.cli import cli

    monkeypatch.setitem(sys.modules, "mcp", None)
    db = tmp_path / "m.db"
    result = CliRunner().invoke(cli, ["mcp", "--db", str(db), "--user", "alice", "--allow-writes"])
    assert result.exit_code == 1 and "pip install 'langmem-trpc[mcp]'" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not db.exists()


async def test_search_is_current_by_default_and_as_of_finds_the_past(tmp_path: Path) -> None:
    path = str(tmp_path / "chain.db")
    with SQLiteMemoryService(path) as svc:
        old = svc.add(ALICE, "Production runs Go 1.23", valid_from="2026-07-01")
        new = svc.update(
            ALICE, old.id, "Production runs Go 1.24", supersede=True, valid_from="2026-07-20"
        )
    async with session(path) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        schema = tools["memory_search"].input_schema
        assert "as_of" in schema["properties"] and "as_of" not in schema["required"]
        now = json.loads(_text(await client.call_tool("memory_search", {"query": "go"})))
        assert [r["id"] for r in now["results"]] == [new.id]
        then = await client.call_tool("memory_search", {"query": "go", "as_of": "2026-07-10"})
        assert not then.is_error
        assert [r["id"] for r in json.loads(_text(then))["results"]] == [old.id]
        loaded = json.loads(_text(await client.call_tool("memory_load", {"limit": 5})))
        assert [r["id"] for r in loaded["results"]] == [new.id]
        bad = await client.call_tool("memory_search", {"query": "go", "as_of": "someday"})
        assert bad.is_error and "as_of" in _text(bad)
