"""An MCP server exposing the memory tools (`langmem-trpc mcp`), on the official `mcp` SDK.

It serves the very tools `create_memory_tools` builds (same schemas, messages and
results), with MCP tool annotations and output schemas; a successful result also
comes as structured content. The identity never comes from tool arguments: it is
the authenticated client (`mcp_identity`), else the process's fixed user.
Arguments nested deeper than `MAX_ARGUMENT_DEPTH` get an error result (see
`_mcp_wire` for the stdio transport and the HTTP app's Host check and token).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.messages.tool import tool_call
from langchain_core.tools import BaseTool
from langgraph.prebuilt import ToolRuntime

from ..errors import ConfigurationError
from ..service.protocol import MemoryService
from ..types import UserKey
from ._mcp_wire import TOO_DEEP
from .tools import create_memory_tools

__all__ = [
    "MAX_ARGUMENT_DEPTH",
    "OUTPUT_SCHEMAS",
    "READ_TOOLS",
    "TOOL_HINTS",
    "WRITE_TOOLS",
    "build_mcp_server",
    "mcp_identity",
]

READ_TOOLS = ("memory_search", "memory_load")
WRITE_TOOLS = ("memory_add", "memory_update", "memory_delete")
MAX_ARGUMENT_DEPTH = 32
"""Deepest nesting of lists and objects a tool argument may have (none needs more than 2)."""
INSTRUCTIONS = (
    "Long-term memory of one user: search and load (and, if enabled, edit) it. "
    "Results are what is true now; memory_search's as_of asks what was true then."
)
"""What the server tells a client about itself at initialization."""

TOOL_HINTS: dict[str, dict[str, bool]] = {
    # add is idempotent by content; update replaces the text; delete is soft (restorable)
    "memory_search": {"read_only_hint": True, "destructive_hint": False, "idempotent_hint": True},
    "memory_load": {"read_only_hint": True, "destructive_hint": False, "idempotent_hint": True},
    "memory_add": {"read_only_hint": False, "destructive_hint": False, "idempotent_hint": True},
    "memory_update": {"read_only_hint": False, "destructive_hint": True, "idempotent_hint": True},
    "memory_delete": {"read_only_hint": False, "destructive_hint": True, "idempotent_hint": True},
}
"""Each tool's MCP annotations (all are closed-world: they touch only this user's memory)."""

_STR: dict[str, Any] = {"type": "string"}
_STRS: dict[str, Any] = {"type": "array", "items": _STR}
_RESULT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": _STR,
        "memory": _STR,
        "topics": _STRS,
        "created": _STR,
        "kind": {"type": "string", "enum": ["fact", "episode"]},
        "event_time": _STR,
        "participants": _STRS,
        "location": _STR,
        "score": {"type": "number"},
        # with `as_of` only: when the memory was true, and what replaced it
        "valid_from": _STR,
        "valid_to": _STR,
        "superseded_by": _STR,
    },
    "required": ["id", "memory", "topics", "created", "kind"],
}
_LISTING: dict[str, Any] = {
    "type": "object",
    "properties": {"results": {"type": "array", "items": _RESULT}, "count": {"type": "integer"}},
    "required": ["results", "count"],
}
_WRITTEN: dict[str, Any] = {
    "type": "object",
    "properties": {"message": _STR, "id": _STR, "memory_id": _STR, "memory": _STR, "topics": _STRS},
    "required": ["message", "id", "memory_id", "memory", "topics"],
}
OUTPUT_SCHEMAS: dict[str, dict[str, Any]] = {
    "memory_search": {
        **_LISTING,
        "properties": {"query": _STR, "as_of": _STR, **_LISTING["properties"]},
        "required": ["query", *_LISTING["required"]],
    },
    "memory_load": {
        **_LISTING,
        "properties": {"limit": {"type": "integer"}, **_LISTING["properties"]},
        "required": ["limit", *_LISTING["required"]],
    },
    "memory_add": _WRITTEN,
    "memory_update": _WRITTEN,
    "memory_delete": {
        "type": "object",
        "properties": {"message": _STR, "id": _STR, "memory_id": _STR},
        "required": ["message", "id", "memory_id"],
    },
}
"""The JSON each tool returns on success (`id` everywhere; `memory_id` is the same id
under the name the write tools take it as an argument). A search with `as_of` also
echoes it and gives each result's validity (`valid_from`, `valid_to`, `superseded_by`)."""


def mcp_identity(app_name: str, user_id: str | None) -> UserKey | None:
    """The user a call acts for: the authenticated client if any, else the fixed user."""
    try:
        from mcp.server.auth.middleware.auth_context import get_access_token
    except ImportError:  # pragma: no cover - the [mcp] extra ships it
        token = None
    else:
        token = get_access_token()
    if token is not None:
        return UserKey(app_name, token.subject or token.client_id)
    return UserKey(app_name, user_id) if user_id else None


def _schema(tool: BaseTool) -> dict[str, Any]:
    out: dict[str, Any] = tool.tool_call_schema.model_json_schema()  # type: ignore[union-attr]
    out.pop("title", None)
    out.pop("description", None)
    return out


def too_deep(value: Any, limit: int = MAX_ARGUMENT_DEPTH) -> bool:
    """True when `value` nests lists or objects deeper than `limit` (or the stdio
    transport already cut it there: `TOO_DEEP`). Iterative: no recursion to exhaust."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if item == TOO_DEEP:
            return True
        if not isinstance(item, (dict, list)):
            continue
        if depth >= limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children)
    return False


def _structured(text: str) -> dict[str, Any] | None:
    """A successful result's JSON object (every memory tool answers one), else None."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _too_deep_error(name: str, arguments: dict[str, Any]) -> str | None:
    deep = sorted(key for key, value in arguments.items() if too_deep(value))
    if not deep:
        return None
    said = "; ".join(f"{key}: nested deeper than {MAX_ARGUMENT_DEPTH} levels" for key in deep)
    return f"{name}: invalid arguments ({said}); check the tool schema and try again"


async def call_memory_tool(
    tool: BaseTool, arguments: dict[str, Any], user: UserKey | None, call_id: str = "mcp"
) -> tuple[str, bool]:
    """Run one memory tool as an agent's ToolNode would; (text, is_error)."""
    configurable = {"app_name": user.app_name, "user_id": user.user_id} if user else {}
    runtime: ToolRuntime[Any] = ToolRuntime(  # ours, never the client's
        state={},
        context=None,
        config={"configurable": {**configurable, "thread_id": "mcp"}},
        stream_writer=lambda _: None,
        tool_call_id=call_id,
        store=None,
    )
    call = tool_call(name=tool.name, args={**arguments, "runtime": runtime}, id=call_id)
    message: ToolMessage = await tool.ainvoke(call)
    text = message.content if isinstance(message.content, str) else json.dumps(message.content)
    return text, message.status == "error"


def _listing(types: Any, tools: Iterable[BaseTool]) -> list[Any]:
    """The `tools/list` entries: each tool's name, description, schemas and hints."""
    return [
        types.Tool(
            name=t.name,
            description=t.description,
            input_schema=_schema(t),
            output_schema=OUTPUT_SCHEMAS[t.name],
            annotations=types.ToolAnnotations(**TOOL_HINTS[t.name], open_world_hint=False),
        )
        for t in tools
    ]


async def _answer(
    tools: dict[str, BaseTool],
    name: str,
    arguments: dict[str, Any],
    app_name: str,
    user_id: str | None,
) -> tuple[str, bool]:
    """One `tools/call` as (text, is_error): an unknown tool or too deep arguments are
    refused before the identity is resolved or the tool runs."""
    tool = tools.get(name)
    deep = _too_deep_error(name, arguments)
    if tool is None:
        hint = " (write tools need --allow-writes)" if name in WRITE_TOOLS else ""
        return f"unknown tool {name!r}{hint}", True
    if deep is not None:
        return deep, True
    return await call_memory_tool(tool, arguments, mcp_identity(app_name, user_id))


def build_mcp_server(
    service: MemoryService,
    *,
    app_name: str = "default",
    user_id: str | None = None,
    allow_writes: bool = False,
) -> Any:
    """An `mcp.server.lowlevel.Server` serving the memory tools for one identity.

    Args:
        service: the memory service (the caller closes it).
        user_id: the fixed user; None to require an authenticated client.
        allow_writes: also serve `memory_add`, `memory_update`, `memory_delete`.
    """
    try:
        import mcp_types as types
        from mcp.server import Server
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConfigurationError(
            "the MCP server needs the [mcp] extra: pip install 'langmem-trpc[mcp]'"
        ) from exc
    names = READ_TOOLS + (WRITE_TOOLS if allow_writes else ())
    tools = {t.name: t for t in create_memory_tools(service, include=names)}
    listed = _listing(types, tools.values())

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=listed)

    async def call_tool(ctx: Any, params: Any) -> Any:
        arguments = dict(params.arguments or {})
        text, is_error = await _answer(tools, params.name, arguments, app_name, user_id)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)],
            structured_content=None if is_error else _structured(text),
            is_error=is_error,
        )

    @asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[dict[str, Any]]:
        # What the service bound to the server's loop (PostgreSQL's async pool)
        # must close before that loop ends; the service itself is the caller's.
        try:
            yield {}
        finally:
            await service.arelease_loop()

    return Server(
        "langmem-trpc",
        lifespan=lifespan,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
