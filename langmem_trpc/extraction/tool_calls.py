"""The extractor's tools: typed declarations for the model, validation of its calls.

The model calls `memory_add`, `memory_update`, `memory_delete` (`memory_clear`
when enabled) or `nothing_to_remember`; the calls are parsed into `MemoryOp`s,
never executed. A call that cannot be trusted (bad JSON, unknown tool, a
missing or mistyped required argument, any other failure reading it) is
logged at WARNING and skipped, the rest of the reply still counts; a
mistyped optional argument is dropped with a warning (an `event_time` or
`valid_until` that is no date included). A reply with no usable memory call and
no `nothing_to_remember` is an `ExtractionError`.

`valid_until` is when a memory stops being true, parsed like `event_time`; a bare
date, month or year means through its end (`valid_until="2026-07-24"` is current
until midnight after July 24).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

from langchain_core.messages import AIMessage

from .._time import parse_flexible_time, until_or_raise
from ..errors import ExtractionError, InvalidTimeError
from ..types import Kind
from .ops import Action, MemoryOp
from .prompts import NOTHING_DESCRIPTION, NOTHING_TOOL, TOOL_NAMES, action_descriptions

__all__ = ["parse_reply", "parse_tool_calls", "tool_schemas"]

logger = logging.getLogger(__name__)

_STRINGS = {"type": "array", "items": {"type": "string"}}
_CONTENT_PROPS: dict[str, Any] = {
    "memory": {
        "type": "string",
        "description": "Durable memory statement, concise, as a fact or an episode that helps future conversations.",
    },
    "topics": {**_STRINGS, "description": "Short concrete topics, including names."},
    "memory_kind": {
        "type": "string",
        "enum": ["fact", "episode"],
        "description": "fact or episode.",
    },
    "event_time": {
        "type": "string",
        "description": "Absolute ISO 8601 date or time of the event (required for episodes).",
    },
    "participants": {**_STRINGS, "description": "People involved, by name."},
    "location": {"type": "string", "description": "Where it happened."},
    "valid_until": {
        "type": "string",
        "description": "Only for something true for a limited time ('until Friday', 'for the next "
        "two weeks', 'this week only'): when it stops being true, as an absolute ISO 8601 date or "
        "date-time resolved against the conversation's date (a date means through that day). "
        "Leave it out for lasting facts.",
    },
}


def _reason(why: str) -> dict[str, Any]:
    return {"type": "object", "properties": {"reason": {"type": "string", "description": why}}}


_ID_PROP = {"memory_id": {"type": "string", "description": "ID of the existing memory, as listed."}}
_PARAMETERS: dict[Action, dict[str, Any]] = {
    Action.ADD: {"type": "object", "properties": _CONTENT_PROPS, "required": ["memory"]},
    Action.UPDATE: {
        "type": "object",
        "properties": {**_ID_PROP, **_CONTENT_PROPS},
        "required": ["memory_id", "memory"],
    },
    Action.DELETE: {"type": "object", "properties": _ID_PROP, "required": ["memory_id"]},
    Action.CLEAR: _reason("Why everything is forgotten."),
}
_BY_NAME = {name: action for action, name in TOOL_NAMES.items()}
_NOTHING_SCHEMA: dict[str, Any] = {
    "name": NOTHING_TOOL,
    "description": NOTHING_DESCRIPTION,
    "parameters": _reason("Why nothing is worth remembering."),
}


def tool_schemas(actions: Collection[Action], policy: str) -> list[dict[str, Any]]:
    """Function declarations (name, description, JSON-schema parameters) for `bind_tools`:
    the offered memory tools, then `nothing_to_remember` (always offered)."""
    descriptions = action_descriptions(policy)
    return [
        *(
            {"name": TOOL_NAMES[a], "description": descriptions[a], "parameters": _PARAMETERS[a]}
            for a in TOOL_NAMES
            if a in actions
        ),
        _NOTHING_SCHEMA,
    ]


class _Skip(Exception):
    """This call is unusable; the message says why."""


def _required_text(args: Mapping[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str) or not value.strip():
        raise _Skip(f"{key!r} must be a non-empty string, got {str(value)[:80]!r}")
    return value.strip()


def _optional_strings(args: Mapping[str, Any], key: str, name: str) -> list[str]:
    value = args.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        logger.warning("extractor: %s.%s is not a list (%.80r); ignored", name, key, value)
        return []
    return [v for v in value if isinstance(v, str)]


def _valid_until(args: Mapping[str, Any], name: str) -> datetime | None:
    """The end of the period `valid_until` names (see the module docstring); None, with a
    warning, when it is no date."""
    raw = args.get("valid_until")
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    try:
        start = parse_flexible_time(raw, "valid_until") if isinstance(raw, str) else None
        end = until_or_raise(raw, "valid_until") if start is not None else None
    except (InvalidTimeError, OverflowError, ValueError) as exc:
        logger.warning(
            "extractor: %s.valid_until %.80r is out of range (%s); ignored", name, raw, exc
        )
        return None
    if end is None:
        logger.warning("extractor: %s.valid_until %.80r is not a date; ignored", name, raw)
        return None
    return end


def _content(args: Mapping[str, Any], name: str) -> dict[str, Any]:
    raw_time = args.get("event_time")
    event_time = parse_flexible_time(raw_time) if isinstance(raw_time, str) else None
    if raw_time not in (None, "") and event_time is None:
        logger.warning("extractor: %s.event_time %r is not a date; ignored", name, raw_time)
    location = args.get("location")
    return {
        "topics": _optional_strings(args, "topics", name),
        "kind": Kind.EPISODE if args.get("memory_kind") == "episode" else Kind.FACT,
        "event_time": event_time,
        "participants": _optional_strings(args, "participants", name),
        "location": location if isinstance(location, str) else None,
        "valid_until": _valid_until(args, name),
    }


def _parse_one(name: str, args: object) -> MemoryOp:
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            raise _Skip(f"arguments are not valid JSON ({exc.msg})") from None
    if not isinstance(args, Mapping):
        raise _Skip("arguments are not a JSON object")
    action = _BY_NAME.get(name)
    if action is None:
        raise _Skip("unknown tool")
    if action == Action.ADD:
        return MemoryOp.add(_required_text(args, "memory"), **_content(args, name))
    if action == Action.UPDATE:
        memory_id = _required_text(args, "memory_id")
        return MemoryOp.update(memory_id, _required_text(args, "memory"), **_content(args, name))
    if action == Action.DELETE:
        return MemoryOp.delete(_required_text(args, "memory_id"))
    return MemoryOp.clear()


def parse_tool_calls(message: AIMessage, allowed: Collection[Action]) -> list[MemoryOp]:
    """Valid operations from the model's tool calls, in order; the rest logged and skipped."""
    ops: list[MemoryOp] = []
    for bad in message.invalid_tool_calls:
        error = bad.get("error") or "invalid"
        logger.warning("extractor: skipped malformed call %r: %s", bad.get("name"), error)
    for call in message.tool_calls:
        name = call.get("name") or ""
        if name == NOTHING_TOOL:
            continue
        try:
            op = _parse_one(name, call.get("args"))
        except Exception as exc:  # any failure reading one call skips that call only
            why = exc if isinstance(exc, _Skip) else f"{type(exc).__name__}: {exc}"
            logger.warning("extractor: skipped call %r: %s", name, why)
            continue
        if op.action not in allowed:
            logger.warning("extractor: skipped call %r: action not offered", name)
            continue
        ops.append(op)
    return ops


def parse_reply(message: AIMessage, allowed: Collection[Action]) -> list[MemoryOp]:
    """`parse_tool_calls`, plus: a reply must hold a usable memory call or `nothing_to_remember`;
    else (prose, or every call skipped) `ExtractionError`, logged: the job fails, its delta kept."""
    ops = parse_tool_calls(message, allowed)
    if ops or any(call.get("name") == NOTHING_TOOL for call in message.tool_calls):
        return ops
    calls = len(message.tool_calls) + len(message.invalid_tool_calls)
    problem = f"all {calls} tool calls were unusable" if calls else "the reply had no tool call"
    text = message.content if isinstance(message.content, str) else str(message.content)
    logger.warning(
        "extractor: failed extraction: %s (expected a memory tool or %s); reply text %.120r",
        problem,
        NOTHING_TOOL,
        text,
    )
    raise ExtractionError(
        f"model reply is not an extraction: {problem}; expected a memory tool call or {NOTHING_TOOL}"
    )
