"""The JSONL export format: one memory per line with its history; write, check, import.

It sits below both front ends: `langmem-trpc export` / `import` (`cli/transfer.py`)
and the inspector's download (`ui/app.py`) use these functions, so the format,
its checks and the import rules are written once. A line is

```
{"format": "langmem-trpc/1", "entry": {...Entry...}, "history": [{...HistoryEvent...}]}
```

An export is lossless for live memories: id, every field, metadata, times,
history, and validity: every version of a chain is a record, with its
`valid_from`, `valid_to` and `superseded_by`, so a round trip keeps the chain (a
record of an older export without them imports as a current memory valid from
its event time, else its creation). Reading checks each record against `add()`'s rules (`memory_from` with
the service's limits) plus an export's own (ids, aware times, history, per-user
capacity); the first bad one raises `line N: field: problem` before anything is
written. An import records itself as the actor of the history it writes (the
file's actor is a claim, not a fact).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from pydantic import ValidationError

from ._time import ensure_utc
from .errors import InvalidInputError, InvalidMemoryError, LangmemTrpcError
from .service.protocol import MemoryService
from .service.rules import Limits, check_memory_id, memory_from
from .types import Entry, HistoryEvent, Operation, Source, UserKey, check_text_value

__all__ = [
    "FORMAT",
    "IMPORT_ACTOR",
    "Record",
    "checked_records",
    "export_lines",
    "import_record",
    "imported_history",
    "validation_problem",
]

FORMAT = "langmem-trpc/1"
"""The `format` of every record; a record without one is read as this format."""

IMPORT_ACTOR = "import"
"""The actor of every history event an import writes: the file's own actor is a claim."""


@dataclass(frozen=True)
class Record:
    """One checked line of an export: the entry to restore and its history."""

    line: int
    entry: Entry
    history: list[HistoryEvent]


def validation_problem(exc: ValidationError, prefix: str = "") -> LangmemTrpcError:
    """The first pydantic error as ours: the library error it wraps, else an
    `InvalidInputError` naming the field ("input" when pydantic names none), or
    under a `prefix` (the part of an import record) an `InvalidMemoryError`."""
    error = exc.errors()[0]
    inner = (error.get("ctx") or {}).get("error")
    if isinstance(inner, LangmemTrpcError):
        return inner
    field = ".".join(str(p) for p in error["loc"])
    if prefix:
        return InvalidMemoryError(f"{prefix}.{field}" if field else prefix, error["msg"])
    return InvalidInputError(field or "input", error["msg"])


# -- export -------------------------------------------------------------------


def export_lines(svc: MemoryService, users: Iterable[UserKey]) -> Iterator[str]:
    """The export of `users`' memories, one JSONL line each, every version of a chain
    included (superseded and lapsed ones, with `valid_from`, `valid_to` and
    `superseded_by`), oldest update first, so an import writes them in that order."""
    for user in users:
        for entry in reversed(svc.read(user, include_superseded=True)):
            record = {
                "format": FORMAT,
                "entry": entry.model_dump(mode="json", exclude={"score", "rrf_score"}),
                "history": [h.model_dump(mode="json") for h in svc.history(user, entry.id)],
            }
            yield json.dumps(record, ensure_ascii=False) + "\n"


# -- reading and checking -------------------------------------------------------


def _check_text(field: str, value: str | None) -> None:
    try:
        check_text_value(field, "" if value is None else value)
    except InvalidMemoryError:  # one message for both problems
        raise InvalidMemoryError(field, "must not contain NUL bytes or lone surrogates") from None


def _entry(raw: object, limits: Limits) -> Entry:
    if not isinstance(raw, dict):
        raise InvalidMemoryError("entry", "must be a JSON object")
    given_from = raw.get("valid_from")  # an older export has no validity fields
    try:  # a stand-in start first: the default needs the parsed event time (zone-less = UTC)
        entry = Entry.model_validate({**raw, "valid_from": given_from or raw.get("created_at")})
    except ValidationError as exc:
        raise validation_problem(exc, "entry") from None
    UserKey(entry.app_name, entry.user_id)  # the same identifier rules as every call
    check_memory_id(entry.id)
    memory = memory_from(entry.memory, limits=limits)
    valid_from = entry.valid_from if given_from else memory.event_time or entry.created_at
    _check_validity(entry, valid_from)
    return entry.model_copy(
        update={
            "memory": memory,
            "valid_from": valid_from,
            "created_at": ensure_utc(entry.created_at, "created_at"),
            "updated_at": ensure_utc(entry.updated_at, "updated_at"),
            "score": None,
            "rrf_score": None,
        }
    )


def _check_validity(entry: Entry, valid_from: datetime) -> None:
    """A version ends no earlier than it starts (a restore leaves an empty interval: the
    undone version was never true) and names another memory as its successor."""
    if entry.valid_to is not None and entry.valid_to < valid_from:
        raise InvalidMemoryError("valid_to", "is before valid_from")
    if entry.superseded_by is not None:
        try:
            check_memory_id(entry.superseded_by)
        except InvalidMemoryError as exc:
            raise InvalidMemoryError("superseded_by", exc.problem) from None
        if entry.superseded_by == entry.id:
            raise InvalidMemoryError("superseded_by", "names the memory itself")


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
    """Each user's stored memories (every version: they all take room) plus the file's
    new ones must fit `limits.capacity`."""
    if limits.capacity is None or limits.on_capacity != "error":
        return
    ids: dict[UserKey, set[str]] = {}  # live ids, then the file's
    for record in records:
        user = record.entry.user
        if user not in ids:
            ids[user] = {e.id for e in service.read(user, include_superseded=True)}
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


# -- import ---------------------------------------------------------------------


def _as_imported(event: HistoryEvent) -> HistoryEvent:
    """`event` recorded as written by the import (thread, message ids and decision kept)."""
    source = event.source.model_dump() if event.source else {}
    return event.model_copy(update={"source": Source(**{**source, "actor": IMPORT_ACTOR})})


def imported_history(record: Record) -> list[HistoryEvent]:
    """The record's history as the import writes it: each event with the actor "import";
    a record without history gets one "add" event by the import, now (every write that
    changes a memory leaves a trace, also one that replaces a memory with the same id)."""
    if record.history:
        return [_as_imported(event) for event in record.history]
    entry = record.entry
    event = HistoryEvent(
        memory_id=entry.id,
        operation=Operation.ADD,
        text_before=None,
        text_after=entry.text,
        at=datetime.now(timezone.utc),
        source=Source(actor=IMPORT_ACTOR),
    )
    return [event]


def import_record(svc: MemoryService, record: Record) -> None:
    """Write one checked record: it replaces the memory with the same id of its own user
    only (another user's memory with that id is a different memory, never touched)."""
    svc.restore(record.entry.user, record.entry, imported_history(record))
