"""Which messages of a thread are new: message filtering and the durable cursor.

LangGraph messages have ids but no timestamps, and histories get summarised
or trimmed, so the cursor records the covered sequence itself: one 8-byte key
per message (a hash of its id, else of its type and text), in order. A job's
messages `M` compare with the covered keys `K`:

1. extends: `K` is a prefix of `M`'s keys: the delta follows position `len(K)`;
2. covered: `M`'s keys are a prefix of `K` (an older snapshot a newer job
   overtook): nothing is new and the cursor is not written, so it never moves back;
3. rewritten: neither (summarised, trimmed, messages removed): the delta
   follows the last message of `M` whose key is in `K` (or retired); if there
   is none, the last summary message, else the whole list ("lost", a WARNING).
   Summaries and trims keep a suffix, so what is left is newer than the anchor;
   re-reading is safe (reconcile and idempotent adds absorb it), skipping is not.

A cursor without keys (written before they existed) is located by its last
message's id, then by content digest nearest the recorded position, then rule 3.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from langchain_core.messages import AIMessage, BaseMessage

from .._time import parse_time_or_none
from ..types import ExtractionCursor

__all__ = [
    "CARRIED_KEY",
    "KEY_BYTES",
    "Delta",
    "advance_cursor",
    "compute_delta",
    "is_memorable",
    "message_digest",
    "message_keys",
    "message_text",
    "message_time",
]

logger = logging.getLogger(__name__)

#: `additional_kwargs["lc_source"]` values whose messages are never memories:
#: LangChain's summary message and memory context injected by this package.
SKIPPED_SOURCES = frozenset({"summarization", "langmem_trpc"})
#: `additional_kwargs` keys read (in order) for a message's own time.
TIME_KEYS = ("timestamp", "time", "created_at")
#: Bytes of one message's key in `ExtractionCursor.message_keys`.
KEY_BYTES = 8
#: Keys a cursor keeps of messages that a rewrite dropped from the thread.
MAX_RETIRED = 4096
#: `additional_kwargs` key of the queue's placeholder for a message over its byte cap
#: (a "chat" message, `queue/_payload.placeholder`): the hex key of the message it stands for.
CARRIED_KEY = "langmem_trpc_key"


def message_text(message: BaseMessage) -> str:
    """The text of a message: string content, or its text parts joined by newlines."""
    content = message.content
    if isinstance(content, str):
        return content.strip()
    parts: list[str] = []
    for part in content:  # a string, or a dict: text parts only
        text = part.get("text") if isinstance(part, dict) and part.get("type") == "text" else part
        if isinstance(text, str):
            parts.append(text.strip())
    return "\n".join(p for p in parts if p)


def is_memorable(message: BaseMessage) -> bool:
    """User and assistant messages with text; never tool traffic, summaries or injected context."""
    if message.type not in ("human", "ai"):
        return False
    if isinstance(message, AIMessage) and (message.tool_calls or message.invalid_tool_calls):
        return False
    if message.additional_kwargs.get("lc_source") in SKIPPED_SOURCES:
        return False
    return bool(message_text(message))


def message_digest(message: BaseMessage) -> str:
    """Content identity of a message (type and text), for anchors without ids."""
    raw = f"{message.type}\x1f{message_text(message)}".encode()
    return hashlib.sha256(raw).hexdigest()[:32]


def message_keys(messages: Sequence[BaseMessage]) -> bytes:
    """The messages' cursor keys, concatenated: a hash of the id, else of type and text
    (a queue placeholder: the key it carries, so a job covers the message it stands for)."""
    out = bytearray()
    blake2b = hashlib.blake2b
    for message in messages:
        if message.type == "chat" and (carried := _carried_key(message)) is not None:
            out += carried
            continue
        if message.id:
            raw = b"i" + message.id.encode()
        else:
            raw = b"d" + f"{message.type}\x1f{message_text(message)}".encode()
        out += blake2b(raw, digest_size=KEY_BYTES).digest()
    return bytes(out)


def _carried_key(message: BaseMessage) -> bytes | None:
    value = message.additional_kwargs.get(CARRIED_KEY)
    if not isinstance(value, str) or len(value) != 2 * KEY_BYTES:
        return None
    try:
        return bytes.fromhex(value)
    except ValueError:
        return None


def message_time(message: BaseMessage) -> datetime | None:
    """The message's own time from `additional_kwargs` (ISO 8601), if the host set one."""
    for key in TIME_KEYS:
        value = message.additional_kwargs.get(key)
        if isinstance(value, datetime) and value.tzinfo is not None:
            return value
        if isinstance(value, str) and (parsed := parse_time_or_none(value)) is not None:
            return parsed
    return None


@dataclass(frozen=True)
class Delta:
    """The new part of a thread and how it was found."""

    messages: tuple[BaseMessage, ...]
    """New memorable messages, in order."""
    start: int
    """Index of the first unread message in the full list."""
    anchor: str
    """How the cursor was located: "none", "extends", "covered", "rewritten", "summary",
    "lost", or for a cursor without keys "id" or "digest"."""

    @property
    def covered(self) -> bool:
        """Everything from `start` on is already covered: the cursor must not be written."""
        return self.anchor == "covered"


def _legacy_anchor(messages: Sequence[BaseMessage], cursor: ExtractionCursor) -> tuple[int, str]:
    """Index after the message of a cursor without keys, and how it was found."""
    if cursor.last_message_id is not None:
        for index in range(len(messages) - 1, -1, -1):
            if messages[index].id == cursor.last_message_id:
                return index + 1, "id"
    if cursor.last_message_digest is not None:
        hits = [
            i for i, m in enumerate(messages) if message_digest(m) == cursor.last_message_digest
        ]
        if hits:
            expected = cursor.message_count - 1
            best = min(hits, key=lambda i: (abs(i - expected), -i))
            return best + 1, "digest"
    return _fallback(messages)


def _fallback(messages: Sequence[BaseMessage]) -> tuple[int, str]:
    summaries = [
        i for i, m in enumerate(messages) if m.additional_kwargs.get("lc_source") == "summarization"
    ]
    if summaries:
        return summaries[-1] + 1, "summary"
    return 0, "lost"


def _split(keys: bytes) -> list[bytes]:
    return [keys[i : i + KEY_BYTES] for i in range(0, len(keys), KEY_BYTES)]


def _keyed_anchor(
    messages: Sequence[BaseMessage], keys: bytes, covered: bytes, retired: bytes
) -> tuple[int, str]:
    """Rules 1-3 of the module docstring against the covered (and retired) keys."""
    if keys.startswith(covered):
        return len(covered) // KEY_BYTES, "extends"
    if covered.startswith(keys):
        return len(messages), "covered"
    known = {*_split(covered), *_split(retired)}
    for index in range(len(messages) - 1, -1, -1):
        if keys[index * KEY_BYTES : (index + 1) * KEY_BYTES] in known:
            return index + 1, "rewritten"
    return _fallback(messages)


def compute_delta(
    messages: Sequence[BaseMessage], cursor: ExtractionCursor | None, keys: bytes | None = None
) -> Delta:
    """New memorable messages after `cursor` (all without one); `keys`: `message_keys(messages)`."""
    start, anchor = 0, "none"
    if cursor is not None and cursor.message_keys:
        keys = message_keys(messages) if keys is None else keys
        start, anchor = _keyed_anchor(messages, keys, cursor.message_keys, cursor.retired_keys)
    elif cursor is not None and {cursor.last_message_id, cursor.last_message_digest} != {None}:
        start, anchor = _legacy_anchor(messages, cursor)  # a cursor written before keys
    if anchor == "lost":
        logger.warning(
            "cursor anchor for thread %r not found (history rewritten); re-reading %d messages",
            cursor and cursor.thread_id,
            len(messages),
        )
    return Delta(tuple(m for m in messages[start:] if is_memorable(m)), start, anchor)


def advance_cursor(
    thread_id: str,
    messages: Sequence[BaseMessage],
    now: datetime | None,
    previous: ExtractionCursor | None = None,
    keys: bytes | None = None,
    offset: int = 0,
) -> ExtractionCursor:
    """The cursor after a successful job: it covers exactly `messages`.

    Keys a rewrite dropped from `previous` join its retired keys (the newest
    `MAX_RETIRED`). `keys`: `message_keys(messages)` if known. `offset`: the index of
    `messages[0]` in the thread (a queued payload starts at its anchor), for `message_count`.
    """
    last = messages[-1] if messages else None
    keys = message_keys(messages) if keys is None else keys
    retired = b""
    if previous is not None:
        retired = previous.retired_keys
        if not keys.startswith(previous.message_keys):
            kept = set(_split(keys))
            retired += b"".join(k for k in _split(previous.message_keys) if k not in kept)
        retired = retired[-MAX_RETIRED * KEY_BYTES :]
    return ExtractionCursor(
        thread_id=thread_id,
        last_message_id=last.id if last is not None else None,
        last_message_digest=message_digest(last) if last is not None else None,
        message_count=offset + len(messages),
        last_extracted_at=now,
        message_keys=keys,
        retired_keys=retired,
    )
