"""`create_agent` middleware: preload before model calls, ingest after the run."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest
from langgraph.runtime import Runtime

from ..service.protocol import MemoryService
from ..types import UserKey
from ._ingest import IngestWorker, Job, ahand_off, hand_off, job
from .identity import MissingIdentityWarning, _current_config, resolve_identity
from .preload import READ_ONLY_TOOLS, Placement, Preloader, merge_block, merge_system

__all__ = ["MemoryIngestMiddleware", "MemoryPreloadMiddleware"]

logger = logging.getLogger(__name__)

Handler = Callable[[ModelRequest], Any]
AHandler = Callable[[ModelRequest], Awaitable[Any]]


class MemoryPreloadMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Injects the user's memories into each model call of a `create_agent` run.

    The block goes into the request only (the agent state never sees it), and
    is reused across the turn's tool-call loop as `Preloader` describes.

    Args:
        preload: 0 (default) off, -1 every memory, N a budget.
        placement: "system" merges into the system message, "user" prepends to the
            first user message (friendlier to prompt caches).
        playbook: replaces the default guidance text above the block.
        read_only_tools: tools that never write memories (their results keep the cached block).
    """

    def __init__(
        self,
        service: MemoryService,
        *,
        preload: int = 0,
        placement: Placement = "system",
        app_name: str | None = None,
        playbook: str | None = None,
        cache_per_turn: bool = True,
        read_only_tools: Collection[str] = READ_ONLY_TOOLS,
    ) -> None:
        super().__init__()
        self.placement = placement
        self.preloader = Preloader(
            service,
            preload=preload,
            app_name=app_name,
            playbook=playbook,
            cache_per_turn=cache_per_turn,
            read_only_tools=read_only_tools,
            component="MemoryPreloadMiddleware",
        )

    def invalidate(self, user: UserKey | None = None) -> None:
        """Drop the cached blocks of `user` (all when None) after writing memories outside tools."""
        self.preloader.invalidate(user)

    def _apply(self, request: ModelRequest, block: str) -> ModelRequest:
        if not block:
            return request
        if self.placement == "user":
            return request.override(messages=merge_block(request.messages, block, "user"))  # type: ignore[arg-type]
        return request.override(system_message=merge_system(request.system_message, block))

    def wrap_model_call(self, request: ModelRequest, handler: Handler) -> Any:
        block = self.preloader.block(request.messages, request.runtime, _current_config())
        return handler(self._apply(request, block))

    async def awrap_model_call(self, request: ModelRequest, handler: AHandler) -> Any:
        block = await self.preloader.ablock(request.messages, request.runtime, _current_config())
        return await handler(self._apply(request, block))


class MemoryIngestMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Hands the thread to the write-path worker when a `create_agent` run ends.

    `MemoryCheckpointer`'s trigger for agents whose checkpointer cannot be
    wrapped (LangGraph Server's own); install one or the other. `after_agent`
    is skipped on interrupts and errors, so one job per completed run.

    Args:
        worker: an `IngestWorker` (`AutoMemoryWorker`, `PostgresJobQueue`).
    """

    def __init__(self, worker: IngestWorker, *, app_name: str | None = None) -> None:
        super().__init__()
        self.worker = worker
        self.app_name = app_name
        self._no_identity = MissingIdentityWarning(
            "MemoryIngestMiddleware", "nothing is extracted from it"
        )

    def _job(self, state: Any, runtime: Runtime[Any]) -> Job | None:
        try:
            config = _current_config()
            info = getattr(runtime, "execution_info", None)
            user = resolve_identity(runtime, config, default_app_name=self.app_name)
            if user is None:
                self._no_identity.warn(runtime, config, self.app_name)
            return job(
                user,
                getattr(info, "thread_id", None)
                or ((config or {}).get("configurable") or {}).get("thread_id"),
                state.get("messages") if isinstance(state, dict) else None,
            )
        except Exception:
            logger.warning("memory ingest middleware could not read the run", exc_info=True)
            return None

    def after_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        hand_off(self.worker, self._job(state, runtime))
        return None

    async def aafter_agent(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        await ahand_off(self.worker, self._job(state, runtime))
        return None
