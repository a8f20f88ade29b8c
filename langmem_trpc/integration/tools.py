"""Memory tools for agents: `memory_search`, `memory_load` and the write tools.

Each tool runs one `_calls` plan, sync or async. Failures become error
`ToolMessage`s safe to show a model (`_safe`: never connection strings or SQL),
under any `ToolNode`. A call identical to an earlier successful one of the same
run is refused (`is_repeat`), which stops a small model looping on one search.
"""

from __future__ import annotations

import json
import logging
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langgraph.prebuilt import ToolRuntime
from pydantic import BaseModel, Field

from .._time import end_of_period, parse_flexible_time
from ..errors import (
    CapacityExceededError,
    ConfigurationError,
    InvalidInputError,
    LangmemTrpcError,
    MemoryConflictError,
    MemoryNotFoundError,
)
from ..service.protocol import MemoryService
from ..types import Entry, SearchOptions, Source, UserKey
from ._calls import Call, Plan, adrive, drive
from .identity import resolve_identity
from .retriever import event_fields

__all__ = ["DEFAULT_TOOLS", "TOOL_NAMES", "create_memory_tools"]

logger = logging.getLogger(__name__)

DEFAULT_TOOLS = ("memory_search", "memory_load")
_SCOPE = (
    "All memory tools operate only on memories already scoped to the current app and current user."
)
MAX_LIMIT = 50


# -- argument schemas (what the model sees) ----------------------------------------


class SearchArgs(BaseModel):
    query: str = Field(
        description="A few keywords naming the people, things or events to look for, not a full question."
    )
    kind: Literal["fact", "episode"] | None = Field(
        default=None,
        description="Preferred kind: 'fact' for stable facts and preferences, 'episode' for events. "
        "A preference, not a filter: other kinds fill in when few match. Leave empty when unsure.",
    )
    time_after: str | None = Field(
        default=None,
        description="Only events on or after this date (e.g. '2024-05-01', 'May 2024', '2024').",
    )
    time_before: str | None = Field(
        default=None,
        description="Only events on or before this date; a year or month includes all of it.",
    )
    order_by_event_time: bool = Field(
        default=False,
        description="Order equally relevant results by when the event happened (oldest first).",
    )
    as_of: str | None = Field(
        default=None,
        description="Only to ask what was true at a past time, such as a value that has since "
        "changed: that time as an ISO date (e.g. '2024-07-15'). The results are the memories "
        "true then, replaced ones included, each with valid_from and valid_to. Leave empty for "
        "what is true now.",
    )
    limit: int = Field(
        default=10, ge=1, le=MAX_LIMIT, description="Maximum results (1-50, default 10)."
    )


class LoadArgs(BaseModel):
    limit: int = Field(
        default=10,
        ge=1,
        le=MAX_LIMIT,
        description="How many of the most recent memories to load (1-50, default 10).",
    )


class _MemoryFields(BaseModel):
    topics: list[str] | None = Field(default=None, description="A few short topic labels.")
    memory_kind: Literal["fact", "episode"] | None = Field(
        default=None,
        description="'fact' for stable facts or preferences, 'episode' for a dated event.",
    )
    event_time: str | None = Field(
        default=None,
        description="When the event happened, ISO 8601 (e.g. '2024-05-08'); required for episodes.",
    )
    participants: list[str] | None = Field(
        default=None, description="People involved in the event."
    )
    location: str | None = Field(default=None, description="Where the event happened.")


class AddArgs(_MemoryFields):
    memory: str = Field(
        description="Durable memory statement to store for the current user. Write it as a concise "
        "third-person fact or episode that will help future conversations."
    )


class UpdateArgs(_MemoryFields):
    memory_id: str = Field(
        description="ID of the stored memory to update. Use memory_search or memory_load first to find it."
    )
    memory: str = Field(
        description="Rewritten memory content that corrects, refines or supersedes the stored one."
    )


class DeleteArgs(BaseModel):
    memory_id: str = Field(description="ID of the stored memory to delete.")


class ClearArgs(BaseModel):
    reason: str | None = Field(
        default=None, description="Why everything is being forgotten (optional)."
    )


_DESCRIPTIONS = {
    "memory_search": (
        "Search the user's long-term memories (facts and past events). Results are ranked by relevance "
        "and carry a 0-1 score, the event date, participants and location.\n"
        "- Use a few keywords from the user's own question (names, things, events), not a full sentence.\n"
        "- Split a multi-part question into several short searches, one per part.\n"
        "- Check `participants` to make sure a memory is about the right person.\n"
        "- For questions about when something happened, or before or after a date, use time_after / "
        "time_before and order_by_event_time.\n"
        "- Results are what is true now. For what was true at a past time (a value that has since "
        "changed), pass as_of with that date.\n"
        "- `kind` is only a preference with automatic fallback; omit it when unsure.\n"
        "- Never repeat a search with the same arguments: its result is already above.\n" + _SCOPE
    ),
    "memory_load": "Load the user's most recent memories, newest first. Use memory_search when you know "
    "what you are looking for; use this for a general overview. " + _SCOPE,
    "memory_add": f"Add a new durable memory about the user. {_SCOPE} If the user clearly asks to "
    "remember, correct or forget something, carry out the memory operation directly. Store concise "
    "factual memories that help future conversations feel contextual and avoid asking the same question "
    "again. Avoid guesses, duplicates, trivial one-off details and sensitive data unless needed for the task.",
    "memory_update": "Update an existing memory when it should remain but needs correction or new detail; "
    "its ID stays the same. " + _SCOPE,
    "memory_delete": f"Delete one memory. {_SCOPE} This operation is destructive. Only use it "
    "when the user explicitly asks to remove saved memory. Prefer memory_update when the memory should remain but "
    "needs correction.",
    "memory_clear": f"Delete ALL memories of the user. {_SCOPE} Use it only when the user "
    "explicitly asks to forget everything or reset saved context.",
}
TOOL_NAMES = tuple(_DESCRIPTIONS)


# -- one plan per tool invocation (`_calls`: written once, run sync or async) ---------


def _result(entry: Entry, validity: bool = False) -> dict[str, Any]:
    """The compact JSON shape of spec §7.1 `Result` (empty fields omitted); `validity`
    adds when it was true (`valid_from`, `valid_to` when it ended, `superseded_by`)."""
    memory = entry.memory
    out: dict[str, Any] = {
        "id": entry.id,
        "memory": memory.text,
        "topics": list(memory.topics),
        "created": entry.created_at.isoformat(timespec="seconds"),
        "kind": memory.kind.value,
        **event_fields(memory, "seconds"),
    }
    if entry.score is not None:
        out["score"] = round(entry.score, 4)
    if validity:
        out["valid_from"] = entry.valid_from.isoformat(timespec="seconds")
        if entry.valid_to is not None:
            out["valid_to"] = entry.valid_to.isoformat(timespec="seconds")
        if entry.superseded_by is not None:
            out["superseded_by"] = entry.superseded_by
    return out


def _dump(payload: dict[str, Any]) -> str:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


def _listing(head: dict[str, Any], found: list[Entry], validity: bool = False) -> tuple[str, Any]:
    payload = {**head, "results": [_result(e, validity) for e in found], "count": len(found)}
    return _dump(payload), [e.model_dump(mode="json") for e in found]


def parse_date(value: str | None, name: str, *, end: bool = False) -> datetime | None:
    """A date argument (`end`: the last second of its period), None when blank; a bad
    date is an `InvalidInputError` naming `name` (the inspector's filters share it)."""
    if value is None or not value.strip():
        return None
    try:
        parsed = end_of_period(value) if end else parse_flexible_time(value)
    except (OverflowError, ValueError) as exc:  # e.g. a time-zone offset past year 9999
        raise InvalidInputError(
            name, f"{value[:40]!r} is outside the supported dates (years 1-9999) ({exc})"
        ) from None
    if parsed is None:
        raise InvalidInputError(name, f"cannot parse {value[:40]!r} as a date (try YYYY-MM-DD)")
    return parsed


def _check_text(value: Any, name: str) -> None:
    """Refuse lone surrogates in any text argument, the same answer on every backend."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidInputError(name, "is not valid Unicode (lone surrogate)") from None
    elif isinstance(value, (list, tuple)):
        for item in value:
            _check_text(item, name)


def _source(runtime: ToolRuntime[Any]) -> Source:
    configurable = (runtime.config or {}).get("configurable") or {}
    thread = configurable.get("thread_id")
    return Source(thread_id=str(thread) if thread else None, actor="tool")


Result = Plan[tuple[str, Any]]


def _search(user: UserKey, runtime: ToolRuntime[Any], a: dict[str, Any]) -> Result:
    query = (a.get("query") or "").strip()
    if not query:
        return _listing({"query": ""}, [])
    try:
        after = parse_date(a.get("time_after"), "time_after")
        before = parse_date(a.get("time_before"), "time_before", end=True)
        if after is not None and before is not None and after > before:
            after_, before_ = a.get("time_after"), a.get("time_before")
            raise InvalidInputError("time_after", f"{after_!r} is after time_before {before_!r}")
    except InvalidInputError as exc:  # bad input, said as a bad search window
        message = f"memory_search: invalid time range: {exc.field} {exc.problem}"
        raise ToolException(message) from None
    try:
        as_of = parse_date(a.get("as_of"), "as_of")
    except InvalidInputError as exc:
        raise ToolException(f"memory_search: invalid as_of: {exc.problem}") from None
    options = SearchOptions(
        kind=a.get("kind"),
        time_after=after,
        time_before=before,
        order_by_event_time=bool(a.get("order_by_event_time")),
        max_results=int(a.get("limit") or 10),
        deduplicate=True,
        hybrid=True,
        kind_fallback=a.get("kind") is not None,
        as_of=as_of,
    )
    head: dict[str, Any] = {"query": query}
    if as_of is not None:
        head["as_of"] = as_of.isoformat(timespec="seconds")
    found = yield Call("search", (user, query, options))
    return _listing(head, found, validity=as_of is not None)


def _load(user: UserKey, runtime: ToolRuntime[Any], a: dict[str, Any]) -> Result:
    limit = int(a.get("limit") or 10)
    limit = 10 if limit <= 0 else min(limit, MAX_LIMIT)
    return _listing({"limit": limit}, (yield Call("read", (user, limit))))


def _delete(user: UserKey, runtime: ToolRuntime[Any], a: dict[str, Any]) -> Result:
    memory_id = a["memory_id"]
    if not (yield Call("delete", (user, memory_id), {"source": _source(runtime)})):
        raise MemoryNotFoundError(memory_id)
    payload = {"message": "Memory deleted successfully", "id": memory_id, "memory_id": memory_id}
    return _dump(payload), None


def _clear(user: UserKey, runtime: ToolRuntime[Any], a: dict[str, Any]) -> Result:
    count = yield Call("clear", (user,), {"source": _source(runtime)})
    return _dump({"message": "All memories cleared successfully", "count": count}), None


def _write(
    message: str, method: str, args: tuple[Any, ...], runtime: ToolRuntime[Any], a: dict[str, Any]
) -> Result:
    parse_date(a.get("event_time"), "event_time")  # bad dates are input errors, before any I/O
    fields = {k: a.get(k) for k in ("topics", "event_time", "participants", "location")}
    if a.get("memory_kind") is not None:
        fields["kind"] = a["memory_kind"]
    entry: Entry = yield Call(method, args, {**fields, "source": _source(runtime)})
    payload = {
        "message": message,
        "id": entry.id,  # the key search and load results use
        "memory_id": entry.id,  # the same, under the name the write tools take it
        "memory": entry.text,
        "topics": list(entry.memory.topics),
    }
    return _dump(payload), [entry.model_dump(mode="json")]


def _add(user: UserKey, runtime: ToolRuntime[Any], a: dict[str, Any]) -> Result:
    return _write("Memory added successfully", "add", (user, a["memory"]), runtime, a)


def _update(user: UserKey, runtime: ToolRuntime[Any], a: dict[str, Any]) -> Result:
    args = (user, a["memory_id"], a["memory"])
    return _write("Memory updated successfully", "update", args, runtime, a)


_TOOLS: dict[
    str, tuple[type[BaseModel], Callable[[UserKey, ToolRuntime[Any], dict[str, Any]], Result]]
] = {
    "memory_search": (SearchArgs, _search),
    "memory_load": (LoadArgs, _load),
    "memory_add": (AddArgs, _add),
    "memory_update": (UpdateArgs, _update),
    "memory_delete": (DeleteArgs, _delete),
    "memory_clear": (ClearArgs, _clear),
}
"""Each tool's argument schema (what the model sees) and its plan."""


_ARG_NAMES = {"text": "memory", "kind": "memory_kind"}


def _safe(name: str, exc: Exception) -> ToolException:
    """A message the model may see: bad input says what is wrong, an outage says only that."""
    if isinstance(exc, InvalidInputError):
        field = _ARG_NAMES.get(exc.field, exc.field)
        return ToolException(f"{name}: invalid {field}: {exc.problem}")
    if isinstance(exc, _INVALID) and not isinstance(exc, LangmemTrpcError):
        logger.info("%s: invalid input", name, exc_info=exc)
        return ToolException(
            f"{name}: invalid input ({type(exc).__name__}); check the arguments and try again"
        )
    if isinstance(exc, MemoryNotFoundError):
        return ToolException(
            f"{name}: memory {exc.memory_id!r} not found; use memory_search or memory_load to find valid ids"
        )
    if isinstance(exc, (MemoryConflictError, CapacityExceededError)):
        return ToolException(f"{name}: {exc}")
    logger.warning("%s failed", name, exc_info=exc)
    return ToolException(
        f"{name} failed: the memory store is unavailable ({type(exc).__name__}). Continue without it."
    )


_INVALID = (ValueError, TypeError, ArithmeticError)
"""Exception types that mean the arguments were unusable, whoever raised them."""


# -- repeated identical calls within one run ----------------------------------------------


def _normal(value: Any) -> Any:
    if isinstance(value, str):
        return " ".join(unicodedata.normalize("NFKC", value).casefold().split())
    if isinstance(value, Mapping):
        return {str(k): _normal(v) for k, v in value.items() if v is not None and k != "runtime"}
    if isinstance(value, (list, tuple)):
        return [_normal(v) for v in value]
    return value


def call_key(name: str, args: Mapping[str, Any]) -> str:
    """What makes two calls the same: the tool and its arguments after defaults and normalising."""
    try:  # the schemas ignore `runtime`; `_normal` drops it
        full: Mapping[str, Any] = _TOOLS[name][0].model_validate(args).model_dump()
    except Exception:  # unvalidated args still compare by what was sent
        full = args
    return name + json.dumps(_normal(full), sort_keys=True, ensure_ascii=False, default=str)


def is_repeat(name: str, runtime: ToolRuntime[Any], args: Mapping[str, Any]) -> bool:
    """True when an earlier call of this run, not answered by an error, was identical."""
    state = runtime.state
    messages = state.get("messages") if isinstance(state, Mapping) else None
    if not isinstance(messages, list):
        return False
    last_user = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=-1)
    messages = messages[last_user + 1 :]
    failed = {
        m.tool_call_id for m in messages if isinstance(m, ToolMessage) and m.status == "error"
    }
    key = call_key(name, args)
    for message in messages:
        if not isinstance(message, AIMessage):
            continue
        for call in message.tool_calls:
            if call.get("id") == runtime.tool_call_id:
                return False
            if call.get("id") not in failed and call_key(call["name"], call["args"]) == key:
                return True
    return False


def _plan(
    name: str, app_name: str | None, runtime: ToolRuntime[Any], args: dict[str, Any]
) -> Result:
    """One invocation: identity, repeat check, text check, the tool's plan; failures made safe."""
    try:  # a failed service call is thrown in at its `yield`, so it lands here too
        user = resolve_identity(runtime, runtime.config, default_app_name=app_name)
        if user is None:
            raise ToolException(
                f"{name} is unavailable: no user identity (app_name/user_id) in the run context "
                "or config"
            )
        if is_repeat(name, runtime, args):
            logger.info("%s: refused a repeated identical call", name)
            refusal = (
                f"{name}: refused, this exact call was already made in this run and its result "
                "is above. Do not repeat it: use that result, change the arguments, or answer the user."
            )
            return refusal, None
        for key, value in args.items():
            _check_text(value, key)
        return (yield from _TOOLS[name][1](user, runtime, args))
    except ToolException:
        raise
    except Exception as exc:
        raise _safe(name, exc) from exc


def _tool(service: MemoryService, app_name: str | None, name: str) -> BaseTool:
    def func(runtime: ToolRuntime[Any], **kwargs: Any) -> tuple[str, Any]:
        return drive(service, _plan(name, app_name, runtime, kwargs))

    async def coroutine(runtime: ToolRuntime[Any], **kwargs: Any) -> tuple[str, Any]:
        return await adrive(service, _plan(name, app_name, runtime, kwargs))

    def invalid(error: Any) -> str:
        problems: list[dict[str, Any]] = getattr(error, "errors", list)()
        said = {  # each argument once, with what is wrong: missing, or the pydantic message
            ".".join(str(p) for p in e.get("loc", ())): "missing"
            if e.get("type") == "missing"
            else str(e.get("msg", "invalid")).lower()[:120]
            for e in problems
        }
        fields = [f"{field}: {why}" for field, why in sorted(said.items())]
        return (
            f"{name}: invalid arguments ({'; '.join(fields or ['arguments'])}); "
            "check the tool schema and try again"
        )

    return StructuredTool.from_function(
        func=func,
        coroutine=coroutine,
        name=name,
        description=_DESCRIPTIONS[name],
        args_schema=_TOOLS[name][0],
        response_format="content_and_artifact",
        handle_tool_error=True,
        handle_validation_error=invalid,
    )


def create_memory_tools(
    service: MemoryService,
    include: Sequence[str] = DEFAULT_TOOLS,
    *,
    app_name: str | None = None,
) -> list[BaseTool]:
    """Build the memory tools to bind to an agent.

    The default, the read tools, suits a background worker that writes the
    memories; name the write tools for agentic mode.

    Args:
        include: tool names, in the order returned.
        app_name: default app when the run's context/config names none.

    Raises:
        ConfigurationError: an unknown tool name, or a name given twice.
    """
    names = list(include)
    unknown = [n for n in names if n not in TOOL_NAMES]
    if unknown:
        raise ConfigurationError(
            f"unknown memory tool(s) {unknown}; choose from {list(TOOL_NAMES)}"
        )
    if len(set(names)) != len(names):
        raise ConfigurationError(f"memory tool listed twice in {names}")
    return [_tool(service, app_name, n) for n in names]
