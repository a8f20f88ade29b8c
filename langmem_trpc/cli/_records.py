"""Reading and checking a JSONL export before `import` writes any of it.

Each record meets `add()`'s rules (`memory_from` with the service's limits)
plus an export's own (ids, aware times, history, per-user capacity). The
first bad one raises `line N: field: problem` before anything is written.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from .._time import ensure_utc
from ..errors import InvalidInputError, InvalidMemoryError
from ..service._core import Limits, check_memory_id, memory_from
from ..service.protocol import MemoryService
from ..types import Entry, HistoryEvent, UserKey, check_text_value
from ._common import validation_problem

FORMAT = "langmem-trpc/1"


@dataclass(frozen=True)
class Record:
    """One checked line of an export: the entry to restore and its history."""

    line: int
    entry: Entry
    history: list[HistoryEvent]


def _check_text(field: str, value: str | None) -> None:
    try:
        check_text_value(field, "" if value is None else value)
    except InvalidMemoryError:  # one message for both problems
        raise InvalidMemoryError(field, "must not contain NUL bytes or lone surrogates") from None


def _entry(raw: object, limits: Limits) -> Entry:
    if not isinstance(raw, dict):
        raise InvalidMemoryError("entry", "must be a JSON object")
    try:
        entry = Entry.model_validate(raw)
    except ValidationError as exc:
        raise validation_problem(exc, "entry") from None
    UserKey(entry.app_name, entry.user_id)  # the same identifier rules as every call
    check_memory_id(entry.id)
    return entry.model_copy(
        update={
            "memory": memory_from(entry.memory, limits=limits),
            "created_at": ensure_utc(entry.created_at, "created_at"),
            "updated_at": ensure_utc(entry.updated_at, "updated_at"),
            "score": None,
            "rrf_score": None,
        }
    )


def _history(raw: object) -> list[HistoryEvent]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidMemoryError("history", "must be a list")
    events: list[HistoryEvent] = []
    for at, item in enumerate(raw):
        try:
            event = HistoryEvent.model_validate(item)
        except ValidationError as exc:
            raise validation_problem(exc, f"history[{at}]") from None
        _check_text(f"history[{at}].text_before", event.text_before)
        _check_text(f"history[{at}].text_after", event.text_after)
        events.append(event)
    return events


def _record(number: int, raw: bytes, limits: Limits) -> Record:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidMemoryError("record", "is not valid UTF-8") from None
    try:
        data: Any = json.loads(text)
    except ValueError as exc:
        raise InvalidMemoryError("record", f"is not JSON ({exc})") from None
    if not isinstance(data, dict) or "entry" not in data:
        raise InvalidMemoryError("record", "not a langmem-trpc export record (no 'entry')")
    if data.get("format", FORMAT) != FORMAT:
        raise InvalidMemoryError("format", f"unsupported format {data['format']!r}")
    return Record(number, _entry(data["entry"], limits), _history(data.get("history")))


def _check_capacity(records: list[Record], service: MemoryService, limits: Limits) -> None:
    """Each user's live memories plus the file's new ones must fit `limits.capacity`."""
    if limits.capacity is None or limits.on_capacity != "error":
        return
    ids: dict[UserKey, set[str]] = {}  # live ids, then the file's
    for record in records:
        user = record.entry.user
        if user not in ids:
            ids[user] = {e.id for e in service.read(user)}
        ids[user].add(record.entry.id)
        if (total := len(ids[user])) > limits.capacity:
            raise InvalidInputError(
                f"line {record.line}: capacity",
                f"{user} would hold {total} memories, more than the capacity of {limits.capacity}",
            )


def checked_records(
    lines: Iterable[bytes],
    service: MemoryService,
    limits: Limits,
    accept: Callable[[Entry], None] = lambda entry: None,
) -> list[Record]:
    """Every record of an export's `lines`, checked (`accept` may refuse an entry with an
    InvalidInputError); raises on the first bad line, before any write."""
    records: list[Record] = []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            record = _record(number, raw, limits)
            accept(record.entry)
            records.append(record)
        except InvalidInputError as exc:
            raise type(exc)(f"line {number}: {exc.field}", exc.problem) from None
    _check_capacity(records, service, limits)
    return records
