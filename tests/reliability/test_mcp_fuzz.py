"""Fuzzing the MCP server: nested arguments always get a reply (issue 31, item 14).

Generated inputs: JSON values of any shape and depth (up to 400 levels, past the
SDK parser's limit of about 200), as raw stdio lines and as tool arguments sent
by the SDK's own client to the server in process.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the [mcp] extra is not installed")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from langmem_trpc import UserKey
from langmem_trpc.backends.sqlite import SQLiteMemoryService
from langmem_trpc.integration._mcp_wire import MAX_JSON_DEPTH, TOO_DEEP, depth_limited
from langmem_trpc.integration.mcp_server import MAX_ARGUMENT_DEPTH, build_mcp_server, too_deep

ALICE = UserKey("support", "alice")
FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
_LEAF = st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.just('[{\\"')
_JSON = st.recursive(
    _LEAF,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=12,
)


def _wrap(value: Any, depth: int, in_objects: bool) -> Any:
    for _ in range(depth):
        value = {"k": value} if in_objects else [value]
    return value


def _depth(value: Any) -> int:
    stack, deepest = [(value, 0)], 0
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level + 1)
            stack.extend(
                (c, level + 1) for c in (item.values() if isinstance(item, dict) else item)
            )
    return deepest


@FUZZ
@given(core=_JSON, depth=st.integers(0, 400), in_objects=st.booleans())
def test_a_cut_line_is_valid_json_no_deeper_than_the_limit(
    core: Any, depth: int, in_objects: bool
) -> None:
    value = _wrap(core, depth, in_objects)
    line = json.dumps({"jsonrpc": "2.0", "id": 7, "params": {"arguments": {"q": value}}})
    cut = json.loads(depth_limited(line))
    assert _depth(cut) <= MAX_JSON_DEPTH and cut["id"] == 7
    if _depth(value) + 3 <= MAX_JSON_DEPTH:
        assert depth_limited(line) == line  # nothing deep enough: untouched
    else:
        assert TOO_DEEP in json.dumps(cut) and too_deep(cut["params"]["arguments"]["q"])


@FUZZ
@given(core=_JSON, depth=st.integers(0, 60))
def test_too_deep_is_exactly_a_nesting_past_the_limit(core: Any, depth: int) -> None:
    value = _wrap(core, depth, in_objects=False)
    assert too_deep(value) is (_depth(value) > MAX_ARGUMENT_DEPTH)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path = Path(tmp_path_factory.mktemp("mcp")) / "m.db"
    with SQLiteMemoryService(str(path)) as svc:
        svc.add(ALICE, "Alice likes green tea")
        yield build_mcp_server(svc, app_name="support", user_id="alice", allow_writes=True)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    core=_JSON,
    depth=st.integers(0, 150),
    name=st.sampled_from(["memory_search", "memory_load", "memory_add"]),
    key=st.sampled_from(["query", "limit", "kind", "anything"]),
)
def test_every_call_gets_a_reply_whatever_its_arguments(
    server: Any, core: Any, depth: int, name: str, key: str
) -> None:
    import anyio
    from mcp import Client

    async def call() -> Any:
        with anyio.fail_after(30):
            async with Client(server) as client:
                return await client.call_tool(name, {key: _wrap(core, depth, False)})

    result = anyio.run(call)
    text = "".join(block.text for block in result.content)
    if _depth(_wrap(core, depth, False)) > MAX_ARGUMENT_DEPTH:
        assert result.is_error and f"{key}: nested deeper than" in text
    assert text  # a reply that says something, error or not
