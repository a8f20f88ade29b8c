"""Exported transcripts: JSONL (one message per line) and LangChain `messages_to_dict` dumps.

Every line is checked before anything is extracted (the rule `import` follows): a bad
file raises `TranscriptError` listing each problem as `line N: field: problem`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    messages_from_dict,
)

from .._time import parse_flexible_time
from ..errors import InvalidInputError
from ..extraction.delta import message_time
from ..types import UserKey
from ._threads import HistoryThread, stamped

ROLES: dict[str, type[BaseMessage]] = {
    "user": HumanMessage,
    "human": HumanMessage,
    "assistant": AIMessage,
    "ai": AIMessage,
    "system": SystemMessage,
}
MAX_SHOWN = 50
"""Problems listed in one `TranscriptError` (the count says how many more)."""


class TranscriptError(InvalidInputError):
    """A transcript file did not validate; `problems` are `line N: field: problem` lines."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.problems = problems
        shown = problems[:MAX_SHOWN]
        more = len(problems) - len(shown)
        tail = f"\n  ... and {more} more" if more else ""
        super().__init__(
            source, "did not validate, nothing extracted:\n  " + "\n  ".join(shown) + tail
        )


def _text(raw: dict[str, Any], name: str, *, required: bool = True) -> str | None:
    value = raw.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value.strip()):
        raise InvalidInputError(name, "must be a non-empty string")
    return value


def _time(raw: dict[str, Any]) -> datetime:
    value = raw.get("timestamp")
    parsed = parse_flexible_time(value) if isinstance(value, str) else None
    if parsed is None:
        raise InvalidInputError("timestamp", "must be an ISO 8601 time, e.g. 2025-03-14T09:30:00Z")
    return parsed


def _line(
    raw: object, last: dict[str, tuple[UserKey, datetime]]
) -> tuple[str, UserKey, BaseMessage]:
    """One checked line: its thread, user and message (stamped with its time)."""
    if not isinstance(raw, dict):
        raise InvalidInputError("line", "must be a JSON object")
    thread_id = _text(raw, "thread_id")
    user = UserKey(_text(raw, "app_name") or "", _text(raw, "user_id") or "")
    role = raw.get("role")
    if role not in ROLES:
        raise InvalidInputError("role", f"must be one of {', '.join(ROLES)}, not {role!r}")
    content = raw.get("content")
    if not isinstance(content, str):
        raise InvalidInputError("content", "must be a string")
    when = _time(raw)
    message_id = _text(raw, "id", required=False)
    assert thread_id is not None
    before = last.get(thread_id)
    if before is not None and before[0] != user:
        raise InvalidInputError(
            "user_id", f"thread {thread_id!r} already belongs to {before[0]} on an earlier line"
        )
    if before is not None and when < before[1]:
        raise InvalidInputError(
            "timestamp", f"earlier than the previous message of thread {thread_id!r}"
        )
    last[thread_id] = (user, when)
    message = ROLES[str(role)](content=content, id=message_id)
    return thread_id, user, stamped(message, when)


def read_transcript_lines(lines: Iterable[str], source: str = "transcript") -> list[HistoryThread]:
    """Threads of a JSONL transcript (`thread_id, app_name, user_id, role, content,
    timestamp[, id]` per line), in the order first seen; `TranscriptError` lists every bad line."""
    problems: list[str] = []
    last: dict[str, tuple[UserKey, datetime]] = {}
    threads: dict[str, list[BaseMessage]] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            thread_id, _, message = _line(json.loads(line), last)
        except json.JSONDecodeError as exc:
            problems.append(f"line {number}: json: {exc.msg} (column {exc.colno})")
        except InvalidInputError as exc:
            problems.append(f"line {number}: {exc.field}: {exc.problem}")
        else:
            threads.setdefault(thread_id, []).append(message)
    if problems:
        raise TranscriptError(source, problems)
    return [HistoryThread(last[t][0], t, tuple(m)) for t, m in threads.items()]


def read_messages_dump(
    text: str, user: UserKey, thread_id: str, source: str = "dump"
) -> HistoryThread:
    """One thread from a `messages_to_dict` JSON list; its messages keep their own times
    (`additional_kwargs["timestamp"]`); `TranscriptError` names each bad item (`item N`)."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TranscriptError(source, [f"line {exc.lineno}: json: {exc.msg}"]) from None
    if not isinstance(raw, list):
        raise TranscriptError(source, ["line 1: messages: must be a JSON list (messages_to_dict)"])
    problems: list[str] = []
    messages: list[BaseMessage] = []
    for number, item in enumerate(raw, 1):
        try:
            messages.extend(messages_from_dict([item]))
        except Exception as exc:  # LangChain raises ValueError, KeyError, TypeError
            problems.append(f"item {number}: message: {type(exc).__name__}: {exc}")
            continue
        if any(k in messages[-1].additional_kwargs for k in ("timestamp", "time", "created_at")):
            if message_time(messages[-1]) is None:
                problems.append(f"item {number}: timestamp: must be an ISO 8601 time")
    if problems:
        raise TranscriptError(source, problems)
    return HistoryThread(user, thread_id, tuple(messages))


def read_file(path: str | Path, **dump: Any) -> list[HistoryThread]:
    """A JSONL transcript, or (a file whose text starts with `[`) a `messages_to_dict` dump
    of one thread, which then needs `user` and `thread_id`."""
    text = Path(path).read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        if dump.get("user") is None or not dump.get("thread_id"):
            raise InvalidInputError(
                "transcripts", f"{path} is a messages_to_dict dump: give its thread and identity"
            )
        return [read_messages_dump(text, dump["user"], dump["thread_id"], str(path))]
    return read_transcript_lines(text.splitlines(), str(path))
