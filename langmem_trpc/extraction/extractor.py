"""Extractors turn new conversation turns into proposed `MemoryOp`s.

`LLMExtractor` asks a tool-calling chat model; `VerbatimExtractor` keeps each
user turn as it was said (no model, the offline baseline). Extractors never
touch storage: the worker reconciles and executes what they propose.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from ..errors import ConfigurationError, ExtractionError, error_text
from ..service.text import primary_tokens
from ..types import Entry, Kind, UserKey, canonical_topics
from .delta import message_text, message_time
from .ops import Action, MemoryOp
from .prompts import DEFAULT_PROMPT, render_system_prompt
from .tool_calls import parse_reply, tool_schemas

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

TIMEOUT_FIELDS = ("request_timeout", "default_request_timeout")
"""Fields of a model whose client takes a per-request `timeout` (OpenAI family, Anthropic)."""

__all__ = [
    "ExtractionRequest",
    "Extractor",
    "LLMExtractor",
    "ModelUsage",
    "VerbatimExtractor",
    "context_topics",
]

logger = logging.getLogger(__name__)

FINAL_INSTRUCTION = "Extract and manage memories from the conversation above."


@dataclass
class ModelUsage:
    """Model calls one extraction made and their tokens, as the provider reported them
    (`AIMessage.usage_metadata`; 0 when it reports none). An extractor adds to
    `ExtractionRequest.usage`; the job copies it into its report (cost accounting)."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    def record(self, reply: object) -> None:
        """Count one model call and the tokens of its reply, if any."""
        self.calls += 1
        usage = getattr(reply, "usage_metadata", None) or {}
        self.input_tokens += int(usage.get("input_tokens") or 0)
        self.output_tokens += int(usage.get("output_tokens") or 0)


@dataclass(frozen=True)
class ExtractionRequest:
    """Everything an extractor may use for one job."""

    user: UserKey
    thread_id: str
    messages: Sequence[BaseMessage]
    """The new user and assistant messages, in order."""
    existing: Sequence[Entry] = ()
    """Memories related to the new messages, with their ids."""
    policy: str = "merge_similar"
    actions: frozenset[Action] = frozenset({Action.ADD, Action.UPDATE, Action.DELETE})
    """Operations the worker will execute; offer no others."""
    reference_time: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    """The "today" of the batch: its latest message time, else the job's time (`run_job`)."""
    timeout: float | None = None
    """Seconds this call may take (the job's remaining time; None: no limit); `LLMExtractor`
    passes it to the model client as its request timeout."""
    usage: ModelUsage = field(default_factory=ModelUsage, compare=False)
    """Where the extractor counts its model calls and tokens (shared by `replace` copies)."""


@runtime_checkable
class Extractor(Protocol):
    """Anything with `extract(request) -> list[MemoryOp]` (called in a worker thread).

    Optional: `uses_existing = False` (the worker skips the existing-memory search);
    `async aextract(request)`, awaited on the worker's loop and cancelled at a job's
    deadline, so a hung call holds no thread (`native_async = False` when it wraps
    blocking work: `extract` runs in a thread); `async aclose()`, awaited on that loop.
    """

    def extract(self, request: ExtractionRequest) -> list[MemoryOp]: ...


def _labelled(message: BaseMessage) -> BaseMessage:
    """The message with its speaker and time written into the text the model reads."""
    when = message_time(message)
    label = ", ".join(x for x in (message.name, when.isoformat() if when else None) if x)
    if not label:
        return message
    return message.model_copy(update={"content": f"[{label}] {message_text(message)}"})


class LLMExtractor:
    """Proposes memory operations with a tool-calling chat model.

    Args:
        model: any LangChain chat model with `bind_tools` (e.g. `ChatOpenAI`).
        prompt: system prompt template; `{current_date}` is replaced. Default: `DEFAULT_PROMPT`.
        reference_date: the "today" used to resolve relative dates. Default: the latest
            message time (`additional_kwargs["timestamp"]`), else the job's time.
        tool_choice: passed to `bind_tools` so the model must call a tool ("any": each
            provider's "required"; None: never passed). Dropped from then on when
            `bind_tools` raises on it, or a call fails naming `tool_choice` (a local
            server without "required"; that call is retried once without it).

    A reply in prose, or whose calls are all unusable, raises `ExtractionError`
    (logged at WARNING): the job fails and the cursor stays before the delta.

    Example:
        ```python
        extractor = LLMExtractor(ChatOpenAI(model="gpt-4o-mini"))
        worker = AutoMemoryWorker(service, extractor)
        ```
    """

    def __init__(
        self,
        model: BaseChatModel,
        *,
        prompt: str | None = None,
        reference_date: date | None = None,
        tool_choice: str | None = "any",
    ) -> None:
        _check_binds_tools(model)
        self.model = model
        self.prompt = prompt or DEFAULT_PROMPT
        self.reference_date = (
            reference_date.date() if isinstance(reference_date, datetime) else reference_date
        )
        self.tool_choice = tool_choice
        self._loop_models = _LoopModels(model)

    def build_messages(self, request: ExtractionRequest) -> list[BaseMessage]:
        """System prompt, the labelled delta, and a closing instruction when the last turn is the assistant's."""
        today = self.reference_date
        if today is None:
            times = [t for t in (message_time(m) for m in request.messages) if t is not None]
            today = (max(times) if times else request.reference_time).date()
        actions = self._actions(request)
        system = render_system_prompt(
            self.prompt, today, policy=request.policy, actions=actions, existing=request.existing
        )
        messages = [SystemMessage(system), *map(_labelled, request.messages)]
        if not isinstance(messages[-1], HumanMessage):
            messages.append(HumanMessage(FINAL_INSTRUCTION))
        return messages

    @property
    def native_async(self) -> bool:
        """Whether the model implements async calls itself (cancelling `aextract` stops them)."""
        from langchain_core.language_models import BaseChatModel

        if isinstance(self.model, BaseChatModel):
            return type(self.model)._agenerate is not BaseChatModel._agenerate
        return callable(getattr(self.model, "ainvoke", None))

    def extract(self, request: ExtractionRequest) -> list[MemoryOp]:
        if not request.messages:
            return []
        actions, tools, messages = self._prepare(request)
        for retry in (False, True):  # once more without tool_choice if the server refused it
            choice = self.tool_choice
            try:
                reply = self.bind(self.model, tools, request.timeout).invoke(messages)
                request.usage.record(reply)
                break
            except Exception as exc:  # any provider failure is an extraction failure
                request.usage.calls += 1
                self._refused(choice, exc, retry)
        return self._ops(reply, actions)

    async def aextract(self, request: ExtractionRequest) -> list[MemoryOp]:
        """`extract` through the model's `ainvoke`; cancelling it cancels the model call."""
        if not request.messages:
            return []
        actions, tools, messages = self._prepare(request)
        model = self._loop_models.get()
        for retry in (False, True):  # once more without tool_choice if the server refused it
            choice = self.tool_choice
            try:
                reply = await self.bind(model, tools, request.timeout).ainvoke(messages)
                request.usage.record(reply)
                break
            except Exception as exc:  # any provider failure is an extraction failure
                request.usage.calls += 1
                self._refused(choice, exc, retry)
        return self._ops(reply, actions)

    async def aclose(self) -> None:
        """Close the HTTP client `aextract` opened for the running event loop, if any."""
        await self._loop_models.aclose()

    def bind(self, model: Any, tools: list[dict[str, Any]], timeout: float | None = None) -> Any:
        """`model` with `tools` bound (with `tool_choice` when the model accepts it) and,
        for a client that takes one, the job's remaining time as its request timeout."""
        bound: Any = None
        if self.tool_choice is not None:
            try:
                bound = model.bind_tools(tools, tool_choice=self.tool_choice)
            except Exception as exc:  # this model's bind_tools has no (such) tool_choice
                logger.info(
                    "extractor: %s.bind_tools rejected tool_choice=%r (%s: %s); binding without it",
                    type(model).__name__,
                    self.tool_choice,
                    type(exc).__name__,
                    exc,
                )
                self.tool_choice = None
        if bound is None:
            bound = model.bind_tools(tools)
        fields = getattr(type(self.model), "model_fields", {})
        if timeout is not None and any(name in fields for name in TIMEOUT_FIELDS):
            bound = bound.bind(timeout=max(timeout, 0.001))
        return bound

    def _prepare(
        self, request: ExtractionRequest
    ) -> tuple[Collection[Action], list[dict[str, Any]], list[BaseMessage]]:
        actions = self._actions(request)
        return actions, tool_schemas(actions, request.policy), self.build_messages(request)

    def _refused(self, choice: str | None, exc: Exception, retry: bool) -> None:
        """Re-raise a failed call as an `ExtractionError`, unless it was the first and
        the server refused `tool_choice`: then drop it, so the caller retries without."""
        if isinstance(exc, ExtractionError) and not retry:
            raise exc
        if retry or choice is None or "tool_choice" not in str(exc):
            raise ExtractionError(f"model call failed: {error_text(exc)}") from exc
        logger.info("extractor: the model server refused tool_choice=%r; retrying without", choice)
        self.tool_choice = None

    @staticmethod
    def _actions(request: ExtractionRequest) -> Collection[Action]:
        return request.actions & ({Action.ADD} if request.policy == "append_only" else set(Action))

    def _ops(self, reply: object, actions: Collection[Action]) -> list[MemoryOp]:
        if not isinstance(reply, AIMessage):
            raise ExtractionError(f"model returned {type(reply).__name__}, expected an AIMessage")
        ops = parse_reply(reply, actions)
        logger.debug("extractor: %d tool calls -> %d operations", len(reply.tool_calls), len(ops))
        return ops


TESTING_HINT = (
    "for tests and offline runs use langmem_trpc.testing.ScriptedChatModel, whose replies "
    "call the memory tools (docs/testing.md)"
)


def _check_binds_tools(model: Any) -> None:
    """Bind the extraction tools once, now: every `BaseChatModel` has a `bind_tools`, but
    LangChain's fakes (`GenericFakeChatModel`) and some others raise `NotImplementedError`
    from it, which would otherwise fail every job later."""
    name = type(model).__name__
    if not callable(getattr(model, "bind_tools", None)):
        raise ConfigurationError(
            f"LLMExtractor needs a chat model with bind_tools (tool calling); {name} has none; "
            f"{TESTING_HINT}"
        )
    try:
        model.bind_tools(tool_schemas(frozenset(Action), "merge_similar"))
    except Exception as exc:  # whatever it raises, no job could ever call the tools
        why = error_text(exc) if str(exc).strip() else f"raised {type(exc).__name__}"
        raise ConfigurationError(
            f"LLMExtractor needs a chat model that can call tools, but {name}.bind_tools "
            f"{why if why.startswith('raised') else 'failed: ' + why}; {TESTING_HINT}"
        ) from exc


class _LoopModels:
    """The model `aextract` uses on each event loop: an httpx async client must not serve
    two loops, yet langchain-openai and langchain-anthropic share one per base URL across
    the process, so a model on that shared client gets a copy with its own per loop."""

    def __init__(self, model: object) -> None:
        self.model = model
        self._lock = threading.Lock()
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[Any, Any]]
        self._by_loop = weakref.WeakKeyDictionary()

    def get(self) -> Any:
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._by_loop.get(loop)
            if entry is None:
                entry = self._by_loop[loop] = _private_async_client(self.model)
            return entry[0]

    async def aclose(self) -> None:
        with self._lock:
            entry = self._by_loop.pop(asyncio.get_running_loop(), None)
        if entry is not None and entry[1] is not None:
            await entry[1].aclose()


def _private_async_client(model: Any) -> tuple[Any, Any]:
    """(a copy of `model` with an async HTTP client of its own, that client), or
    (`model`, None) when it does not use the shared one."""
    root: Any = getattr(model, "root_async_client", None)
    if (
        getattr(model, "http_async_client", True) is None
        and callable(getattr(root, "with_options", None))
        and hasattr(model, "async_client")
    ):
        import openai

        client = openai.DefaultAsyncHttpxClient()
        private = root.with_options(http_client=client)
        update = {"root_async_client": private, "async_client": private.chat.completions}
        return model.model_copy(update=update), client
    if getattr(model, "anthropic_proxy", True) is None and "_async_client" in dir(type(model)):
        import anthropic

        client = anthropic.DefaultAsyncHttpxClient()
        copy = model.model_copy()
        copy.__dict__["_async_client"] = model._async_client.with_options(http_client=client)
        return copy, client
    return model, None


CONTEXT_TOPICS = 64
"""At most this many context topics per turn (the service's default topic limit)."""
CONTEXT_WORD_CHARS = 64
"""A longer word of the previous turn (a URL, a hash) is no topic: no question names it,
and as a topic it would pass the service's topic length limit and lose the turn."""


def context_topics(
    speaker: str | None, previous: str | None, previous_speaker: str | None
) -> list[str]:
    """A verbatim turn's speaker, then the previous turn's speaker and distinct words, as
    topics: a question naming what the previous turn said finds the reply, whose text stays
    as said (LoCoMo turn recall@10 +0.018, docs/bench-locomo.md round 4)."""
    topics = [name for name in (speaker, previous_speaker) if name]
    if previous:
        words = primary_tokens(previous, stem=False)  # words as said; indexing stems them
        topics += [word for word in words if len(word) <= CONTEXT_WORD_CHARS]
    return canonical_topics(topics)[:CONTEXT_TOPICS]


class VerbatimExtractor:
    """Each user message becomes an episode, as said; no model, works offline.

    Event time is the message's own time (`additional_kwargs["timestamp"]`), participants
    its speaker's `name`; records are de-duplicated only when identical, never merged.
    `context` (default): topics hold `context_topics` of the batch's previous turn.
    """

    uses_existing = False
    """Raw turns need no existing memories: the worker skips that search."""

    def __init__(self, *, include_assistant: bool = False, context: bool = True) -> None:
        self.include_assistant = include_assistant
        self.context = context

    def extract(self, request: ExtractionRequest) -> list[MemoryOp]:
        kept = ("human", "ai") if self.include_assistant else ("human",)
        ops: list[MemoryOp] = []
        previous: tuple[str | None, str | None] = (None, None)  # the last turn's text, speaker
        for message in request.messages:
            text = message_text(message)
            if message.type in kept and text:
                topics = context_topics(message.name, *previous) if self.context else []
                ops.append(
                    MemoryOp.add(
                        text,
                        kind=Kind.EPISODE,
                        event_time=message_time(message),
                        participants=[message.name] if message.name else [],
                        topics=topics,
                        verbatim=True,
                    )
                )
            if text and message.type in ("human", "ai"):
                previous = (text, message.name)
        return ops
