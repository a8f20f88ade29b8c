"""`create_preload_node`: preload for plain `StateGraph` users.

Both shapes keep the block out of `messages`: with `model=` the node returns only
the model's reply; without, it writes the block to `state[context_key]` for the
graph's own model node to `merge_block` (never a message, so never re-extracted).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from langchain_core.language_models import LanguageModelInput
from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda

from ..service.protocol import MemoryService
from .preload import Placement, Preloader, merge_block

__all__ = ["create_preload_node"]

logger = logging.getLogger(__name__)

_READ = "__pregel_read"
"""LangGraph's reader of the running graph's channels in a node's config (langgraph 1.x;
pinned by tests/integration): reading an undeclared state key raises KeyError."""


class _MissingChannel:
    """Warns once per node when the graph's state has no `context_key`: LangGraph drops a
    node's write to an undeclared key silently, so the block would vanish."""

    def __init__(self, context_key: str) -> None:
        self.context_key = context_key
        self._checked = False
        self._lock = threading.Lock()

    def check(self, config: Mapping[str, Any]) -> None:
        with self._lock:
            if self._checked:
                return
            self._checked = True
        read = (config.get("configurable") or {}).get(_READ)
        if not callable(read):
            return
        try:
            read(self.context_key, fresh=False)
        except KeyError:
            logger.warning(
                "create_preload_node: the graph's state has no %r key, so the memory block "
                "this node writes there is dropped; declare `%s: str` in the state schema, "
                "or pass model= so the node calls the model itself",
                self.context_key,
                self.context_key,
            )
        except Exception:  # any other reader trouble: no warning rather than a failed run
            logger.debug("create_preload_node: could not check the state keys", exc_info=True)


def create_preload_node(
    service: MemoryService,
    model: Runnable[LanguageModelInput, BaseMessage] | None = None,
    *,
    preload: int = 10,
    placement: Placement = "system",
    app_name: str | None = None,
    playbook: str | None = None,
    messages_key: str = "messages",
    context_key: str = "memory_context",
) -> Runnable[Any, dict[str, Any]]:
    """A graph node (sync and async) that preloads the user's memories.

    Args:
        model: the chat model (already `bind_tools`-ed if you use tools); None
            writes the block to `state[context_key]` instead, which the state schema
            must declare (else LangGraph drops it: warned once per node).
        preload: 0 off, -1 everything, N a budget (see `select_memories`).
        placement: "system" or "user" (see `merge_block`).
        playbook: replaces the default guidance text above the block.
    """
    loader = Preloader(
        service,
        preload=preload,
        app_name=app_name,
        playbook=playbook,
        component="create_preload_node",
    )
    channel = _MissingChannel(context_key)

    def _messages(state: Any) -> list[BaseMessage]:
        value = (
            state.get(messages_key)
            if isinstance(state, dict)
            else getattr(state, messages_key, None)
        )
        return list(value or [])

    def run(state: Any, config: RunnableConfig) -> dict[str, Any]:
        messages = _messages(state)
        block = loader.block(messages, None, config)
        if model is None:
            channel.check(config)
            return {context_key: block}
        return {messages_key: [model.invoke(merge_block(messages, block, placement), config)]}

    async def arun(state: Any, config: RunnableConfig) -> dict[str, Any]:
        messages = _messages(state)
        block = await loader.ablock(messages, None, config)
        if model is None:
            channel.check(config)
            return {context_key: block}
        return {
            messages_key: [await model.ainvoke(merge_block(messages, block, placement), config)]
        }

    return RunnableLambda(run, afunc=arun, name="memory_preload")
