"""A scripted tool-calling chat model: the one fake the test-suite needs.

LangChain's own fakes have no `bind_tools`, so `create_agent(..., tools=...)`
and our extractor cannot use them (langgraph_surface.md pitfall 1).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from pydantic import ConfigDict, Field, PrivateAttr


def tool_call(
    name: str, args: dict[str, Any] | None = None, call_id: str | None = None
) -> dict[str, Any]:
    """A tool call dict as `AIMessage(tool_calls=[...])` expects it."""
    return {
        "name": name,
        "args": args or {},
        "id": call_id or f"call_{uuid.uuid4().hex[:12]}",
        "type": "tool_call",
    }


class ScriptedChatModel(BaseChatModel):
    """Answers from a script, one reply per call, and records what it was sent.

    A reply is an `AIMessage` (with or without `tool_calls`), a string, or a
    function of the input messages. When the script runs out, `default` is
    used if set; otherwise the call fails loudly.

    `bound_tools` records the tool names of each `bind_tools` call and
    `bound_options` its keyword arguments (e.g. `tool_choice`). With
    `accepts_tool_choice=False`, `bind_tools(..., tool_choice=...)` raises
    `TypeError`, like a model whose `bind_tools` has no such parameter; with
    `serves_tool_choice=False`, a call bound with `tool_choice` fails like a
    server that does not support it (the reply is not consumed).

    Example:
        ```python
        model = ScriptedChatModel(replies=[
            AIMessage("", tool_calls=[tool_call("memory_search", {"query": "go version"})]),
            "You run Go 1.24.",
        ])
        ```
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    replies: list[Any] = Field(default_factory=list)
    default: Any = None
    calls: list[list[BaseMessage]] = Field(default_factory=list)
    bound_tools: list[list[str]] = Field(default_factory=list)
    bound_options: list[dict[str, Any]] = Field(default_factory=list)
    accepts_tool_choice: bool = True
    serves_tool_choice: bool = True
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _position: int = PrivateAttr(default=0)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(
        self, tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool], **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        if "tool_choice" in kwargs and not self.accepts_tool_choice:
            raise TypeError("bind_tools() got an unexpected keyword argument 'tool_choice'")
        names = [
            str(getattr(t, "name", None) or (t.get("name") if isinstance(t, dict) else t))
            for t in tools
        ]
        with self._lock:
            self.bound_tools.append(names)
            self.bound_options.append(dict(kwargs))
        return self.bind(tools=list(names), **kwargs)

    def _next_reply(self, messages: list[BaseMessage]) -> AIMessage:
        with self._lock:
            self.calls.append(list(messages))
            if self._position < len(self.replies):
                reply = self.replies[self._position]
                self._position += 1
            elif self.default is not None:
                reply = self.default
            else:
                raise RuntimeError(
                    f"ScriptedChatModel ran out of replies after {self._position} calls"
                )
        if callable(reply) and not isinstance(reply, BaseMessage):
            reply = reply(messages)
        if isinstance(reply, str):
            reply = AIMessage(content=reply)
        if not isinstance(reply, AIMessage):
            raise TypeError(f"script reply must be an AIMessage or str, got {type(reply).__name__}")
        return reply.model_copy(update={"id": reply.id or f"run-{uuid.uuid4().hex[:12]}"})

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if kwargs.get("tool_choice") is not None and not self.serves_tool_choice:
            raise ValueError(
                f"Error code: 400 - tool_choice {kwargs['tool_choice']!r} is not supported"
            )
        return ChatResult(generations=[ChatGeneration(message=self._next_reply(messages))])

    @property
    def remaining(self) -> int:
        return max(len(self.replies) - self._position, 0)
