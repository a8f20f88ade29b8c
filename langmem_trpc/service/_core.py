"""Pure rules every backend shares: validation, fingerprints, update patches, limits.

Backends call these before they touch storage, so a rejected input never
writes anything and every backend rejects the same inputs the same way.
"""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import ValidationError

from .._time import parse_time_or_raise
from ..errors import ConfigurationError, InvalidMemoryError, InvalidUserKeyError
from ..types import Kind, Memory, SearchOptions, UserKey
from ._text import normalize_text

__all__ = [
    "CapacityPolicy",
    "Limits",
    "build_memory",
    "check_memory_id",
    "check_user",
    "embedding_text",
    "fingerprint",
    "memory_from",
    "new_memory_id",
    "new_memory_ids",
    "patch_memory",
    "resolve_options",
    "utcnow",
]

CapacityPolicy = Literal["error", "evict"]


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
    """"error" raises CapacityExceededError; "evict" soft-deletes the least recently updated."""

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
    return datetime.now(timezone.utc)


def new_memory_id() -> str:
    """Random, stable for the life of the memory (never derived from content)."""
    return uuid.uuid4().hex


def new_memory_ids(n: int) -> list[str]:
    """`n` ids like `new_memory_id()` (random version-4 UUIDs as hex) from one
    `os.urandom` call: per-id `uuid4()` was a tenth of a bulk insert's time."""
    raw = bytearray(os.urandom(16 * n))
    for at in range(0, 16 * n, 16):
        raw[at + 6] = raw[at + 6] & 0x0F | 0x40  # version 4
        raw[at + 8] = raw[at + 8] & 0x3F | 0x80  # RFC 4122 variant
    text = raw.hex()
    return [text[at : at + 32] for at in range(0, 32 * n, 32)]


def check_user(user: object) -> UserKey:
    if not isinstance(user, UserKey):
        raise InvalidUserKeyError("user", f"expected a UserKey, got {type(user).__name__}")
    return user


def check_memory_id(memory_id: object) -> str:
    if not isinstance(memory_id, str) or not memory_id.strip():
        raise InvalidMemoryError("memory_id", "must be a non-empty string")
    if len(memory_id) > 512 or "\x00" in memory_id:
        raise InvalidMemoryError("memory_id", "must be at most 512 characters without NUL bytes")
    return memory_id


def _check_text(text: object, limits: Limits) -> str:
    if not isinstance(text, str):
        raise InvalidMemoryError("text", f"must be a string, got {type(text).__name__}")
    if not text.strip():
        raise InvalidMemoryError("text", "must not be empty")
    if len(text) > limits.max_text_length:
        raise InvalidMemoryError(
            "text", f"is {len(text)} characters, more than the limit of {limits.max_text_length}"
        )
    _check_encodable("text", text)
    return text.strip()


def _check_encodable(field: str, value: str) -> None:
    """NUL bytes and lone surrogates cannot be stored by every backend: reject them up front."""
    if "\x00" in value:
        raise InvalidMemoryError(field, "must not contain NUL bytes")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidMemoryError(field, "is not valid Unicode (lone surrogate)") from None


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
        _check_encodable(field, value)
    return list(values)


def _check_kind(kind: object) -> Kind:
    if isinstance(kind, Kind):
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
    _check_encodable("location", location)
    return location


def _construct(**fields: Any) -> Memory:
    try:
        return Memory(**fields)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"]) or "memory"
        raise InvalidMemoryError(field, error["msg"]) from None


def build_memory(
    text: object,
    *,
    limits: Limits,
    topics: object = None,
    kind: object = Kind.FACT,
    event_time: object = None,
    participants: object = None,
    location: object = None,
    metadata: dict[str, Any] | None = None,
) -> Memory:
    """Validate every field and return a normalised Memory, or raise naming the field."""
    return _construct(
        text=_check_text(text, limits),
        topics=_check_names("topics", topics, limits.max_topics, limits.max_topic_length),
        kind=_check_kind(kind),
        event_time=parse_time_or_raise(event_time, "event_time"),
        participants=_check_names(
            "participants", participants, limits.max_participants, limits.max_name_length
        ),
        location=_check_location(location, limits),
        metadata=dict(metadata or {}),
    )


def memory_from(item: object, *, limits: Limits) -> Memory:
    """An `add_many` item, a text or a `Memory` built elsewhere, held to the same rules as `add()`."""
    if isinstance(item, Memory):
        return build_memory(
            item.text,
            limits=limits,
            topics=item.topics,
            kind=item.kind,
            event_time=item.event_time,
            participants=item.participants,
            location=item.location,
            metadata=item.metadata,
        )
    if isinstance(item, str):  # a plain text: every other field is its default
        return Memory.model_construct(
            text=_check_text(item, limits),
            topics=[],
            kind=Kind.FACT,
            event_time=None,
            participants=[],
            location=None,
            metadata={},
        )
    return build_memory(item, limits=limits)


def patch_memory(
    current: Memory,
    text: object,
    *,
    limits: Limits,
    topics: object = None,
    kind: object = None,
    event_time: object = None,
    participants: object = None,
    location: object = None,
    metadata: dict[str, Any] | None = None,
) -> Memory:
    """New text always; every other field only when given (None keeps the stored value)."""
    return build_memory(
        text,
        limits=limits,
        topics=current.topics if topics is None else topics,
        kind=current.kind if kind is None else kind,
        event_time=current.event_time if event_time is None else event_time,
        participants=current.participants if participants is None else participants,
        location=current.location if location is None else location,
        metadata=current.metadata if metadata is None else metadata,
    )


def fingerprint(memory: Memory, explicit_id: str | None = None) -> str:
    """Content identity within one user: normalised text plus event metadata.

    Topics and metadata are not part of it. A memory added under a caller-chosen
    id (the BaseStore adapter) is its own identity, so equal text under two
    keys stays two memories.
    """
    parts = [
        "text:" + normalize_text(memory.text),
        "kind:" + memory.kind.value,
        "event:" + (memory.event_time.strftime("%Y-%m-%dT%H:%M:%SZ") if memory.event_time else ""),
        "with:" + ",".join(p.casefold() for p in memory.participants),
        "at:" + (memory.location or "").casefold(),
    ]
    if explicit_id is not None:
        parts.append("id:" + explicit_id)
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def embedding_text(text: str, participants: Sequence[str]) -> str:
    """The text the vector leg embeds for a memory: its participants, then its text.

    `"Caroline: I went to a support group"`: who said or is concerned by a
    memory is part of what it means, and the keyword leg already sees them
    (verbatim turns carry the speaker in their topics). Participants the text
    already names (a whole-word, case-insensitive match) are not repeated, and a
    memory without participants embeds its text alone. Every backend embeds this
    on add, update (when it changes), restore and backfill; the query is
    embedded as written.
    """
    missing = [p for p in participants if not _mentions(text, p)]
    return f"{', '.join(missing)}: {text}" if missing else text


def _mentions(text: str, name: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text, re.IGNORECASE) is not None


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
    return options
