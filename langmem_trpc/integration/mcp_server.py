"""An MCP server exposing the memory tools (`langmem-trpc mcp`), on the official `mcp` SDK.

It serves the very tools `create_memory_tools` builds (same schemas, messages and
results). The identity never comes from tool arguments: it is the authenticated
client (`mcp_identity`), else the process's fixed user.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.messages.tool import tool_call
from langchain_core.tools import BaseTool
from langgraph.prebuilt import ToolRuntime

from ..errors import ConfigurationError
from ..service.protocol import MemoryService
from ..types import UserKey
from .tools import create_memory_tools

__all__ = ["READ_TOOLS", "WRITE_TOOLS", "build_mcp_server", "mcp_identity"]

READ_TOOLS = ("memory_search", "memory_load")
WRITE_TOOLS = ("memory_add", "memory_update", "memory_delete")


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
    listed = [
        types.Tool(name=t.name, description=t.description, input_schema=_schema(t))
        for t in tools.values()
    ]

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=listed)

    async def call_tool(ctx: Any, params: Any) -> Any:
        tool = tools.get(params.name)
        if tool is None:
            hint = " (write tools need --allow-writes)" if params.name in WRITE_TOOLS else ""
            text, is_error = f"unknown tool {params.name!r}{hint}", True
        else:
            user = mcp_identity(app_name, user_id)
            text, is_error = await call_memory_tool(tool, dict(params.arguments or {}), user)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], is_error=is_error
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
        instructions="Long-term memory of one user: search and load (and, if enabled, edit) it.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
