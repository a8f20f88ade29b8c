"""Pure rules every backend shares: validation, fingerprints, update patches, limits.

Backends call these before they touch storage, so a rejected input never
writes anything and every backend rejects the same inputs the same way.
"""

from __future__ import annotations

import hashlib
import json
import math
import operator
import os
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any, Literal, SupportsIndex, TypeVar

from pydantic import BaseModel

from .. import _time
from ..errors import (
    ConfigurationError,
    InvalidInputError,
    InvalidMemoryError,
    InvalidTimeError,
    InvalidUserKeyError,
)
from ..types import (
    MEMORY_ID_PATTERN,
    Entry,
    ExtractionCursor,
    HistoryEvent,
    Kind,
    Memory,
    SearchOptions,
    UserKey,
    canonical_participants,
    canonical_topics,
    check_identifier,
    check_optional_id,
    check_source,
    check_text_value,
)
from .text import normalize_text

__all__ = [
    "FIELDS",
    "MAX_LIMIT",
    "MAX_METADATA_DEPTH",
    "CapacityPolicy",
    "Limits",
    "MemoryPatch",
    "build_memory",
    "check_app_filter",
    "check_cursor",
    "check_expiry",
    "check_flag",
    "check_items",
    "check_memory_id",
    "check_metadata",
    "check_new_memory_id",
    "check_read_limit",
    "check_restorable",
    "check_thread_id",
    "check_user",
    "check_valid_until",
    "check_validity",
    "checked_model",
    "embedding_text",
    "fingerprint",
    "is_blank",
    "is_expired",
    "memory_from",
    "new_memory_id",
    "new_memory_ids",
    "resolve_options",
    "stored_fingerprint",
    "unexpired",
    "utcnow",
]

CapacityPolicy = Literal["error", "evict"]

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Limits:
    """Per-service bounds on what one memory may hold."""

    max_text_length: int = 8_000
    """Characters of memory text; longer text is rejected, never truncated."""
    max_topics: int = 64
    max_topic_length: int = 128
    max_participants: int = 64
    max_name_length: int = 256
    """Characters of one participant or the location."""
    capacity: int | None = 1_000
    """Live memories per user; None for unlimited."""
    on_capacity: CapacityPolicy = "error"
    """"error" raises CapacityExceededError; "evict" soft-deletes the least recently written
    (added, updated or revived) memory, by a per-user write order that ignores the wall clock."""

    def __post_init__(self) -> None:
        if self.capacity is not None and self.capacity < 1:
            raise ConfigurationError("capacity must be >= 1 or None")
        if self.on_capacity not in ("error", "evict"):
            raise ConfigurationError(
                f"on_capacity must be 'error' or 'evict', not {self.on_capacity!r}"
            )
        if self.max_text_length < 1:
            raise ConfigurationError("max_text_length must be >= 1")


def utcnow() -> datetime:
    """Now in UTC, from the one clock seam (`_time.wall_clock`)."""
    return _time.wall_clock()


def is_expired(entry: Entry, now: datetime | None = None) -> bool:
    """Whether the entry's expiry (`Entry.expires_at`) has passed."""
    return entry.expires_at is not None and entry.expires_at <= (now or utcnow())


def unexpired(entries: Iterable[Entry], now: datetime | None = None) -> list[Entry]:
    """The entries whose expiry has not passed: what get, read and search return."""
    at = now or utcnow()
    return [e for e in entries if e.expires_at is None or e.expires_at > at]


_UUID4_BITS = (0x4000 << 64) | (0x8000 << 48)  # version 4, RFC 4122 variant
_UUID4_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))


def new_memory_id() -> str:
    """Random, stable for the life of the memory (never derived from content): a
    version-4 UUID as hex, made as `uuid4()` makes it minus its `UUID` object (half the cost)."""
    return f"{int.from_bytes(os.urandom(16)) & _UUID4_CLEAR | _UUID4_BITS:032x}"


def new_memory_ids(n: int) -> list[str]:
    """`n` ids like `new_memory_id()` (random version-4 UUIDs as hex) from one
    `os.urandom` call: per-id `uuid4()` was a tenth of a bulk insert's time."""
    raw = bytearray(os.urandom(16 * n))
    for at in range(0, 16 * n, 16):
        raw[at + 6] = raw[at + 6] & 0x0F | 0x40  # version 4
        raw[at + 8] = raw[at + 8] & 0x3F | 0x80  # RFC 4122 variant
    text = raw.hex()
    return [text[at : at + 32] for at in range(0, 32 * n, 32)]


def check_app_filter(app_name: object) -> str | None:
    """`users(app_name)`'s filter: None, or an app name as `UserKey` accepts it."""
    return None if app_name is None else check_identifier("app_name", app_name)


def check_user(user: object) -> UserKey:
    if not isinstance(user, UserKey):
        raise InvalidUserKeyError("user", f"expected a UserKey, got {type(user).__name__}")
    return user


def check_memory_id(memory_id: object) -> str:
    if not isinstance(memory_id, str) or not memory_id.strip():
        raise InvalidMemoryError("memory_id", "must be a non-empty string")
    if len(memory_id) > 512 or "\x00" in memory_id:
        raise InvalidMemoryError("memory_id", "must be at most 512 characters without NUL bytes")
    return check_text_value("memory_id", memory_id)


def check_new_memory_id(memory_id: object) -> str:
    """A caller-chosen id for a new memory: `check_memory_id`, and `MEMORY_ID_PATTERN`
    in full (lookups by id stay lenient: an id that cannot exist is simply not found)."""
    checked = check_memory_id(memory_id)
    if not MEMORY_ID_PATTERN.fullmatch(checked):
        raise InvalidMemoryError(
            "memory_id",
            "a chosen id must be ASCII letters, digits and _ . : @ / + = - "
            f"(starting with a letter, digit or _), got {checked[:64]!r}",
        )
    return checked


MAX_LIMIT = 2**62
"""A `limit` this large reads everything: no store holds that many rows, and SQLite
and PostgreSQL cannot bind an integer past 2**63 - 1."""


def check_read_limit(limit: object) -> int | None:
    """`read`, `deleted` and `expired`'s `limit`: None or an integer (not a bool), 0 or less (or
    `MAX_LIMIT` and more) meaning no limit; every backend gets the same answer."""
    if limit is None:
        return None
    if isinstance(limit, bool):
        raise InvalidInputError("limit", "must be an integer or None, not a bool")
    if not isinstance(limit, SupportsIndex):  # int and numpy integers; never 1.5 or "5"
        raise InvalidInputError("limit", f"must be an integer or None, got {type(limit).__name__}")
    count = operator.index(limit)
    return count if 0 < count < MAX_LIMIT else None


def check_expiry(expires_at: object) -> datetime | None:
    """`set_expiry`'s `expires_at`: None (no expiry), an aware datetime or a date string
    (parsed like `event_time`; zone-less means UTC); a blank string is refused, not None."""
    if isinstance(expires_at, str) and not expires_at.strip():
        raise InvalidTimeError("expires_at", "must not be blank; pass None to remove the expiry")
    return _time.parse_time_or_raise(expires_at, "expires_at")


def check_valid_until(until: datetime | None, start: datetime) -> None:
    """A business-time end must come after its start: an empty interval would make
    the memory true at no time at all (`InvalidTimeError` naming `valid_until`)."""
    if until is not None and until <= start:
        raise InvalidTimeError(
            "valid_until",
            f"must be after valid_from ({start.isoformat()}), got {until.isoformat()}",
        )


def check_validity(
    valid_from: object, valid_until: object, start: datetime | None = None
) -> tuple[datetime | None, datetime | None]:
    """`add`/`update`'s business time: each an aware datetime or a date string (parsed
    like `event_time`; zone-less means UTC) or None; `valid_until` must be after
    `valid_from`, else after `start` (an add's event time, else now) where one is known.
    A bare date, month or year as `valid_until` means through its end, as for the
    extractor's tools (`_time.until_or_raise`)."""
    begin = _time.parse_time_or_raise(valid_from, "valid_from")
    until = _time.until_or_raise(valid_until, "valid_until")
    if begin is not None or start is not None:
        check_valid_until(until, begin or start or utcnow())
    return begin, until


def check_flag(name: str, value: object) -> bool:
    """A keyword that must be True or False (`supersede`): never a truthy stand-in."""
    if not isinstance(value, bool):
        raise InvalidInputError(name, f"must be True or False, got {type(value).__name__}")
    return value


def check_items(items: object) -> Iterable[object]:
    """`add_many`'s `items`: a list (any iterable) of texts or `Memory` objects; a str,
    bytes or a mapping is refused instead of being stored one character or key at a time."""
    if isinstance(items, (str, bytes, bytearray, Mapping)) or not isinstance(items, Iterable):
        raise InvalidMemoryError(
            "items", f"must be a list of texts or Memory objects, not {type(items).__name__}"
        )
    return items


def check_thread_id(thread_id: object) -> str:
    """A cursor's thread id: a string every backend can store (no NUL, no lone surrogate)."""
    checked = check_optional_id("thread_id", thread_id)
    if checked is None:
        raise InvalidMemoryError("thread_id", "must be a string, got NoneType")
    return checked


def check_cursor(cursor: object) -> ExtractionCursor:
    """An `ExtractionCursor` whose ids every backend can store, else a field-named error."""
    if not isinstance(cursor, ExtractionCursor):
        raise InvalidMemoryError(
            "cursor", f"expected an ExtractionCursor, got {type(cursor).__name__}"
        )
    check_thread_id(cursor.thread_id)
    check_optional_id("cursor.last_message_id", cursor.last_message_id)
    check_optional_id("cursor.last_message_digest", cursor.last_message_digest)
    return cursor


MAX_METADATA_DEPTH = 32
"""Nesting levels of lists and dicts a memory's metadata may have."""


def check_metadata(metadata: object) -> dict[str, Any]:
    """Metadata as every backend stores and returns it: JSON values only.

    The result equals what a JSON round trip gives back, so the in-memory,
    SQLite and PostgreSQL backends return the same value: tuples become lists,
    `datetime`, `date` and `time` values become their `isoformat()` strings.
    Refused, naming the path: keys that are not strings, NaN and infinities,
    strings with a NUL byte or a lone surrogate (PostgreSQL's jsonb cannot hold
    NUL), values of other types and nesting deeper than `MAX_METADATA_DEPTH`.
    """
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise InvalidMemoryError("metadata", f"must be a dict, got {type(metadata).__name__}")
    value = _json_value("metadata", metadata, 0)
    assert isinstance(value, dict)
    return value


def _json_value(path: str, value: object, depth: int) -> Any:
    """`value` as JSON gives it back; errors name the field "metadata" and the path in it."""
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _bad_metadata(path, f"must be a finite number, not {value!r}")
        return value
    if isinstance(value, str):
        return _metadata_string(path, value)
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if depth >= MAX_METADATA_DEPTH:
        raise _bad_metadata(path, f"is nested deeper than {MAX_METADATA_DEPTH} levels")
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise _bad_metadata(path, f"keys must be strings, got {type(key).__name__}")
            _metadata_string(f"{path} key {key[:32]!r}", key)
            out[key] = _json_value(f"{path}.{key}", item, depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return [_json_value(f"{path}[{i}]", item, depth + 1) for i, item in enumerate(value)]
    kinds = "str, number, bool, None, list, dict, datetime"
    raise _bad_metadata(path, f"must be a JSON value ({kinds}), not {type(value).__name__}")


def _metadata_string(path: str, value: str) -> str:
    try:
        return check_text_value(path, value)
    except InvalidMemoryError as exc:
        raise _bad_metadata(path, exc.problem) from None


def _bad_metadata(path: str, problem: str) -> InvalidMemoryError:
    return InvalidMemoryError("metadata", problem if path == "metadata" else f"{path} {problem}")


def check_restorable(entry: object, history: Sequence[HistoryEvent] = ()) -> Entry:
    """An exported entry (and its history) that every backend can store exactly.

    `restore` writes entries back as they are (no trimming, no limits), so
    only what storage itself needs is checked: every string free of NUL
    bytes and lone surrogates, JSON metadata (`check_metadata`) and aware times
    within years 1-9999 in UTC; the returned entry carries the normalised
    metadata and its times in UTC.
    """
    if not isinstance(entry, Entry):
        raise InvalidMemoryError("entry", f"expected an Entry, got {type(entry).__name__}")
    check_memory_id(entry.id)
    memory = entry.memory
    check_text_value("text", memory.text)
    for name, values in (("topics", memory.topics), ("participants", memory.participants)):
        for value in values:
            check_text_value(name, value)
    if memory.location is not None:
        check_text_value("location", memory.location)
    for event in history:
        check_source(event.source)
        for text in (event.text_before, event.text_after):
            if text is not None:
                check_text_value("history.text", text)
    check_optional_id("superseded_by", entry.superseded_by)
    metadata = check_metadata(memory.metadata)
    update: dict[str, Any] = _restorable_times(entry)
    if entry.valid_from is None:  # an entry built without validation (`model_construct`)
        update["valid_from"] = update.get("event_time", memory.event_time) or update.get(
            "created_at", entry.created_at
        )
    if metadata != memory.metadata or "event_time" in update:
        fields = {"metadata": metadata, "event_time": update.pop("event_time", memory.event_time)}
        update["memory"] = memory.model_copy(update=fields)
    return entry.model_copy(update=update) if update else entry


def _restorable_times(entry: Entry) -> dict[str, Any]:
    """The entry's times in UTC where they are not yet; an instant outside years 1-9999
    in UTC (an import's `expires_at` of 9999-12-31T23:00-05:00) is an `InvalidTimeError`
    here, not an `OverflowError` on every later read of the user's memories."""
    times = {
        "created_at": entry.created_at,
        "updated_at": entry.updated_at,
        "expires_at": entry.expires_at,
        "event_time": entry.memory.event_time,
        "valid_from": entry.valid_from,
        "valid_to": entry.valid_to,
    }
    changed: dict[str, Any] = {}
    for name, value in times.items():
        if value is None:
            continue
        if not isinstance(value, datetime):
            raise InvalidTimeError(name, f"expected a datetime, got {type(value).__name__}")
        utc = _time.ensure_utc(value, name)
        if value.utcoffset() != timedelta(0):
            changed[name] = utc
    return changed


_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")
"""Letters and symbols that draw nothing (Hangul fillers, the blank Braille pattern)."""


def _invisible(char: str) -> bool:
    """Whether `char` draws nothing: a space, a format character (zero-width space,
    joiners, BOM, soft hyphen), a variation selector or a blank letter."""
    if char.isspace() or char in _BLANK_LETTERS:
        return True
    code = ord(char)
    if 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF:
        return True
    return unicodedata.category(char) == "Cf"


def is_blank(text: str) -> bool:
    """Whether `text` shows nothing at all: empty, or only invisible characters."""
    if text.isascii():  # the invisible ASCII characters are exactly the whitespace
        return not text.strip()
    return all(_invisible(char) for char in text)


def _check_text(text: object, limits: Limits) -> str:
    if not isinstance(text, str):
        raise InvalidMemoryError("text", f"must be a string, got {type(text).__name__}")
    if not text.strip():
        raise InvalidMemoryError("text", "must not be empty")
    if is_blank(text):
        raise InvalidMemoryError("text", "must not be empty (it has only invisible characters)")
    if len(text) > limits.max_text_length:
        raise InvalidMemoryError(
            "text", f"is {len(text)} characters, more than the limit of {limits.max_text_length}"
        )
    check_text_value("text", text)
    return text.strip()


def _check_names(field: str, values: object, max_count: int, max_length: int) -> list[str]:
    if values is None:
        return []
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise InvalidMemoryError(field, "must be a list of strings")
    if len(values) > max_count:
        raise InvalidMemoryError(
            field, f"has {len(values)} items, more than the limit of {max_count}"
        )
    for value in values:
        if not isinstance(value, str):
            raise InvalidMemoryError(field, f"items must be strings, got {type(value).__name__}")
        if len(value) > max_length:
            raise InvalidMemoryError(field, f"item longer than {max_length} characters")
        check_text_value(field, value)
    return list(values)


def _check_kind(kind: object) -> Kind:
    if isinstance(kind, Kind):  # the common case; `Kind(...)` below costs a microsecond
        return kind
    if isinstance(kind, str):
        try:
            return Kind(kind.strip().lower())
        except ValueError:
            pass
    raise InvalidMemoryError("kind", f"unknown kind {kind!r} (expected 'fact' or 'episode')")


def _check_location(location: object, limits: Limits) -> str | None:
    if location is None:
        return None
    if not isinstance(location, str):
        raise InvalidMemoryError("location", "must be a string")
    if len(location) > limits.max_name_length:
        raise InvalidMemoryError("location", f"longer than {limits.max_name_length} characters")
    check_text_value("location", location)
    return location.strip() or None


def checked_model(cls: type[M], **values: Any) -> M:
    """`cls.model_construct(**values)` for checked values naming every field, minus
    pydantic's per-field alias and default walk (three per add: memory, entry, event)."""
    model, put = cls.__new__(cls), object.__setattr__
    put(model, "__dict__", values)
    put(model, "__pydantic_fields_set__", set(values))
    put(model, "__pydantic_extra__", None)
    put(model, "__pydantic_private__", None)
    return model


def build_memory(
    text: object,
    *,
    limits: Limits,
    topics: object = None,
    kind: object = Kind.FACT,
    event_time: object = None,
    participants: object = None,
    location: object = None,
    metadata: object = None,
) -> Memory:
    """Validate every field and return a normalised Memory, or raise naming the field.

    Every field is checked and canonicalised here as `Memory`'s validators would,
    so the model is built without validating again (a third of the validation's cost).
    """
    return checked_model(
        Memory,
        text=_check_text(text, limits),
        topics=canonical_topics(
            _check_names("topics", topics, limits.max_topics, limits.max_topic_length)
        ),
        kind=_check_kind(kind),
        event_time=_time.parse_time_or_raise(event_time, "event_time"),
        participants=canonical_participants(
            _check_names(
                "participants", participants, limits.max_participants, limits.max_name_length
            )
        ),
        location=_check_location(location, limits),
        metadata=check_metadata(metadata),
    )


FIELDS = ("topics", "kind", "event_time", "participants", "location", "metadata")
"""A memory's fields besides its text (the keywords of `build_memory`)."""


def memory_from(item: object, *, limits: Limits) -> Memory:
    """An `add_many` item, a text or a `Memory` built elsewhere, held to the same rules as `add()`."""
    if isinstance(item, Memory):
        return build_memory(item.text, limits=limits, **{f: getattr(item, f) for f in FIELDS})
    if isinstance(item, str):  # a plain text: every other field is its default
        return checked_model(Memory, **{**_BLANK, "text": _check_text(item, limits)})
    return build_memory(item, limits=limits)


@dataclass(frozen=True)
class MemoryPatch:
    """What an `update()` changes: new text always, every other field only when not None."""

    text: object
    topics: object = None
    kind: object = None
    event_time: object = None
    participants: object = None
    location: object = None
    metadata: object = None

    def apply(self, current: Memory, limits: Limits) -> Memory:
        """`current` with this patch, validated: None keeps the stored value."""
        given = {f: getattr(self, f) for f in FIELDS}
        kept = {f: getattr(current, f) if v is None else v for f, v in given.items()}
        return build_memory(self.text, limits=limits, **kept)

    def check(self, limits: Limits) -> None:
        """Raise naming the field if any given field is invalid, whatever it patches."""
        self.apply(Memory.model_construct(**_BLANK), limits)


_BLANK: dict[str, Any] = {
    "text": "",
    "topics": [],
    "kind": Kind.FACT,
    "event_time": None,
    "participants": [],
    "location": None,
    "metadata": {},
}


def fingerprint(memory: Memory, explicit_id: str | None = None) -> str:
    """Content identity within one user: normalised text plus event metadata.

    Topics and metadata are not part of it. A memory added under a caller-chosen
    id (the BaseStore adapter) is its own identity, so equal text under two
    keys stays two memories.

    The fields are joined by U+001F, with participants joined by commas: the
    historical encoding, kept so stored fingerprints stay valid. That joined
    form is ambiguous only when a participant holds a comma or a participant,
    the location or the explicit id holds U+001F (the normalised text never
    does: it turns U+001F into a space), so those memories hash a JSON list of
    the fields instead, which starts with "[" where the old form starts with
    "text:" and so can equal no old form.
    """
    with_ = [p.casefold() for p in memory.participants]
    at = (memory.location or "").casefold()
    parts = [
        "text:" + normalize_text(memory.text),
        "kind:" + memory.kind.value,
        "event:" + (memory.event_time.strftime("%Y-%m-%dT%H:%M:%SZ") if memory.event_time else ""),
    ]
    in_names = any("," in p or "\x1f" in p for p in with_)
    if in_names or "\x1f" in at or "\x1f" in (explicit_id or ""):
        fields: list[Any] = [*parts, with_, at, explicit_id]
        encoded = json.dumps(fields, ensure_ascii=False)
        return hashlib.sha256(encoded.encode()).hexdigest()
    parts += ["with:" + ",".join(with_), "at:" + at]
    if explicit_id is not None:
        parts.append("id:" + explicit_id)
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def stored_fingerprint(
    text: str,
    kind: str,
    event_time: datetime | None,
    participants: Sequence[str],
    location: str | None,
    explicit_id: str | None,
) -> str:
    """`fingerprint` of a stored row's columns (the backends' fingerprint migrations
    recompute rows written under the ambiguous participants encoding)."""
    columns = {"kind": Kind(kind), "event_time": event_time, "location": location}
    memory = Memory.model_construct(
        **{**_BLANK, **columns, "text": text, "participants": list(participants)}
    )
    return fingerprint(memory, explicit_id)


def embedding_text(text: str) -> str:
    """The text the vector leg embeds for a memory: its text alone.

    Participants are not embedded: the keyword leg and the "participants"
    ranking step already read them, and embedding "Speaker: text" made the
    vector leg a speaker detector that lost recall in the fused ranking on
    LoCoMo's development half (docs/bench-locomo.md, round 7). Every backend
    embeds this on add, update, restore and backfill; the query is embedded
    as written (a hybrid query naming a participant also with the name masked:
    `FusionSettings.mask_names`).
    """
    return text


def resolve_options(query: str | None, options: SearchOptions | None) -> SearchOptions:
    """The positional query wins over `options.query`."""
    if options is None:
        options = SearchOptions()
    elif not isinstance(options, SearchOptions):
        raise InvalidMemoryError("options", f"expected SearchOptions, got {type(options).__name__}")
    if query is not None:
        if not isinstance(query, str):
            raise InvalidMemoryError("query", "must be a string")
        options = options.model_copy(update={"query": query})
    check_text_value("query", options.query)
    return options
