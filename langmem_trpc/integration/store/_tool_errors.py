"""`StoreToolErrors`: store errors inside a tool become an error `ToolMessage`.

langmem's memory tools call the store directly and set no `handle_tool_error`,
and LangGraph's `ToolNode` (v1) turns only invalid tool arguments into a tool
message: any other exception ends the run. So a refused namespace
(`NamespaceAccessError`), a refused value or a full store raised out of
`agent.invoke`. This middleware gives the model the error instead, as our own
memory tools do, and the run goes on. It catches only langmem_trpc's errors; a
backend outage is said without its details (never a connection string or SQL).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware, AgentState, ToolCallRequest
from langchain_core.messages import ToolMessage
from langgraph.types import Command

from ...errors import (
    CapacityExceededError,
    InvalidInputError,
    LangmemTrpcError,
    MemoryConflictError,
    MemoryNotFoundError,
    NamespaceAccessError,
)

logger = logging.getLogger(__name__)

_SAID = (
    NamespaceAccessError,
    InvalidInputError,
    CapacityExceededError,
    MemoryConflictError,
    MemoryNotFoundError,
)

Reply = ToolMessage | Command[Any]


def tool_error_message(name: str, exc: LangmemTrpcError) -> str:
    """What the model is told: the refusal itself, or only that the store is down."""
    if isinstance(exc, _SAID):
        return f"{name} failed: {exc}. Do not retry this call as it is."
    logger.warning("%s failed", name, exc_info=exc)
    return f"{name} failed: the memory store is unavailable ({type(exc).__name__}). Continue without it."


def store_tool_error(exc: LangmemTrpcError) -> str:
    """The same for a hand-built `ToolNode(tools, handle_tool_errors=store_tool_error)`:
    LangGraph reads the handled type (langmem_trpc's errors only) from the annotation."""
    return tool_error_message("the memory tool", exc)


def _error(request: ToolCallRequest, exc: LangmemTrpcError) -> ToolMessage:
    name = str(request.tool_call.get("name") or "tool")
    return ToolMessage(
        tool_error_message(name, exc),
        tool_call_id=request.tool_call["id"],
        name=name,
        status="error",
    )


class StoreToolErrors(AgentMiddleware[AgentState[Any], Any, Any]):
    """`create_agent(..., middleware=[StoreToolErrors()])`: a langmem_trpc error raised
    inside any tool (langmem's tools on `MemoryStore`) is answered to the model as an
    error tool message; other exceptions pass through unchanged."""

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Reply]
    ) -> Reply:
        try:
            return handler(request)
        except LangmemTrpcError as exc:
            return _error(request, exc)

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[Reply]]
    ) -> Reply:
        try:
            return await handler(request)
        except LangmemTrpcError as exc:
            return _error(request, exc)
