"""A queued job's payload: the thread's delta since the durable cursor, anchored.

The payload is the delta (`extraction.delta`) with one message before it, the
*anchor*: the last message the cursor covered (if any). The cursor only moves forward,
so at run time the anchor is still covered and rule 3 of `extraction.delta`
("rewritten") finds the delta after it; a job overtaken by a newer one finds
everything covered and does nothing. Why an anchor rather than the whole thread:
payloads and the cursor rows queued jobs write stay bounded by the delta, not the
thread (older keys join the retired keys).

Messages are serialised with LangChain's `messages_to_dict`; a delta over
`max_payload_bytes` of JSON is queued as consecutive jobs (`JobPayload.chunked_json`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, time
from enum import Enum
from typing import Any

from langchain_core.messages import (
    BaseMessage,
    ChatMessage,
    messages_from_dict,
    messages_to_dict,
)

from ..errors import ConfigurationError, InvalidInputError, QueuePayloadTooLargeError
from ..extraction.delta import CARRIED_KEY, KEY_BYTES, compute_delta, message_keys
from ..extraction.job import _has_work as has_work  # the job's own peek test, shared
from ..types import ExtractionCursor, UserKey

FORMAT = 1
"""Version of the job arguments' layout (`v`)."""
MAX_QUEUE_NAME = 128
"""procrastinate's `queue_name` is a varchar(128)."""
MIN_PAYLOAD_BYTES = 65_536
"""Smallest `max_payload_bytes`: room for the job's ids and two placeholders at their
longest (512 characters each, escaped: about 32 KB), so no message can stop a thread."""
OMITTED_BYTES = "langmem_trpc_omitted_bytes"
"""`additional_kwargs` key of a placeholder: the size of the message it stands for."""


def select_messages(payload: JobPayload, cursor: ExtractionCursor | None) -> JobPayload | None:
    """The anchor and the delta of the thread in `payload` after `cursor`; None when there
    is no work (`run_job`'s peek test: nothing new or unread, no dead letter to retry)."""
    delta = compute_delta(payload.messages, cursor)
    if not has_work(payload.messages, delta, cursor):
        return None
    start = max(0, delta.start - 1)
    window = payload.messages[start:]
    anchored = start < delta.start
    return JobPayload(payload.user, payload.thread_id, window, payload.offset + start, anchored)


@dataclass(frozen=True)
class Omitted:
    """A message over the cap, queued as a placeholder (`JobPayload.split`)."""

    index: int
    """Its index in the thread."""
    message_id: str | None
    size: int
    """Bytes of its JSON."""


@dataclass(frozen=True)
class Chunks:
    """The job arguments of one enqueue (JSON text, in order) and the messages omitted."""

    texts: list[str]
    omitted: tuple[Omitted, ...]


def placeholder(message: BaseMessage, size: int, cap: int) -> ChatMessage:
    """What a job carries instead of a message of `size` bytes of JSON over the cap `cap`.

    A `ChatMessage` (never memorable, so no extractor reads it) with the message's id and
    its cursor key (`delta.CARRIED_KEY`, so the job's cursor covers the real message) and
    a note of the size; `role` keeps the message's type for a reader of the job."""
    note = (
        f"[message omitted from the queued job: {size} bytes of JSON, over max_payload_bytes {cap}]"
    )
    kwargs: dict[str, Any] = {
        "lc_source": "langmem_trpc",
        CARRIED_KEY: message_keys([message]).hex(),
        OMITTED_BYTES: size,
    }
    return ChatMessage(content=note, role=message.type, id=message.id, additional_kwargs=kwargs)


def _stub_dict(message: BaseMessage, size: int, cap: int) -> dict[str, Any]:
    return messages_to_dict([placeholder(message, size, cap)])[0]


@dataclass(frozen=True)
class JobPayload:
    """The arguments of one queued job, decoded."""

    user: UserKey
    thread_id: str
    messages: tuple[BaseMessage, ...]
    offset: int = 0
    """Index of `messages[0]` in the thread, so the cursor a job writes counts the
    thread's messages (`ExtractionCursor.message_count`), not the payload's."""
    anchored: bool = False
    """`messages[0]` is the anchor, a message the cursor already covers (`select_messages`)."""

    def chunked_json(self, cap: int) -> list[str]:
        """The arguments as JSON text, in as many jobs as `cap` bytes each needs (`split`)."""
        return self.split(cap).texts

    def split(self, cap: int) -> Chunks:
        """The arguments as JSON text in jobs of at most `cap` bytes, and what was omitted.

        Each chunk after the first starts with the previous one's last message as its
        anchor, so chunk k finds its delta once chunk k - 1 moved the cursor. An anchor
        that leaves no room for the next message travels as its placeholder (it was
        carried whole before: only its key matters). A message that cannot fit even beside
        a placeholder anchor is replaced by its own placeholder (`placeholder`) and listed
        in `Chunks.omitted`: the thread goes on past it. Always ends; raises
        `QueuePayloadTooLargeError` only when two placeholders and the job's ids do not fit
        (`PostgresJobQueue` refuses a cap that small). Values JSON has no type for (a
        `datetime` in `additional_kwargs`, ...) are written as their ISO 8601 text, others
        as `str()`.
        """
        dicts = messages_to_dict(list(self.messages))
        sizes = [len(_dumps(d).encode()) + 1 for d in dicts]  # + its comma
        base = len(self._text([], len(dicts)).encode())  # the longest offset any chunk has
        if base + sum(sizes) - 1 <= cap:
            return Chunks([self._text(dicts, 0)], ())
        stubs = [_stub_dict(m, n - 1, cap) for m, n in zip(self.messages, sizes, strict=True)]
        stub_sizes = [len(_dumps(d).encode()) + 1 for d in stubs]
        omitted: list[Omitted] = []
        for i in range(1 if self.anchored else 0, len(dicts)):
            room = cap - base - (stub_sizes[i - 1] if i else 0)
            if sizes[i] <= room:
                continue
            if stub_sizes[i] > room:  # the ids alone: only a cap below `MIN_PAYLOAD_BYTES`
                raise QueuePayloadTooLargeError(cap - room + stub_sizes[i], cap, 2 if i else 1)
            omitted.append(Omitted(self.offset + i, self.messages[i].id, sizes[i] - 1))
            dicts[i], sizes[i] = stubs[i], stub_sizes[i]
        return Chunks(self._chunks(dicts, sizes, stubs, cap, base), tuple(omitted))

    def _chunks(
        self,
        dicts: list[dict[str, Any]],
        sizes: list[int],
        stubs: list[dict[str, Any]],
        cap: int,
        base: int,
    ) -> list[str]:
        """Greedy chunks of messages that each fit beside a placeholder anchor (`split`)."""
        texts: list[str] = []
        start, anchored = 0, self.anchored
        while True:
            head, size = dicts[start], base + sizes[start]
            more = start + 1 < len(dicts)
            if anchored and (size > cap or (more and size + sizes[start + 1] > cap)):
                head, size = stubs[start], base + len(_dumps(stubs[start]).encode()) + 1
            end = start + 1
            while end < len(dicts) and size + sizes[end] <= cap:
                size, end = size + sizes[end], end + 1
            texts.append(self._text([head, *dicts[start + 1 : end]], start))
            if end == len(dicts):
                return texts
            start, anchored = end - 1, True  # progress: a chunk holds a new message

    def _text(self, dicts: list[dict[str, Any]], start: int) -> str:
        """The task arguments of the chunk of `dicts` starting `start` messages in."""
        return _dumps(
            {
                "v": FORMAT,
                "app": self.user.app_name,
                "user": self.user.user_id,
                "thread": self.thread_id,
                "offset": self.offset + start,
                "messages": dicts,
            }
        )


def _dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), default=_json_default)


def _json_default(value: object) -> str:
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    return str(value)


def decode(args: dict[str, Any]) -> JobPayload:
    """A job's arguments back to a payload; `InvalidInputError` names what is wrong."""
    if args.get("v") != FORMAT:
        raise InvalidInputError("v", f"unknown job payload version {args.get('v')!r}")
    for name in ("app", "user", "thread"):
        if not isinstance(args.get(name), str):
            raise InvalidInputError(name, "must be a string in the job payload")
    raw = args.get("messages")
    if not isinstance(raw, list):
        raise InvalidInputError("messages", "must be a list in the job payload")
    offset = args.get("offset", 0)  # absent in jobs queued before it existed
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise InvalidInputError("offset", "must be a non-negative integer in the job payload")
    try:
        messages = tuple(messages_from_dict(raw))
    except Exception as exc:
        raise InvalidInputError("messages", f"cannot be decoded: {exc}") from None
    return JobPayload(UserKey(args["app"], args["user"]), args["thread"], messages, offset)


def app_queue(queue: str, app_name: str) -> str:
    """The procrastinate queue of one app's jobs, `queue@app` (`queue@#<hash of app>`
    past procrastinate's 128 characters), so a worker can take some apps only."""
    name = f"{queue}@{app_name}"
    if len(name) <= MAX_QUEUE_NAME:
        return name
    return f"{queue}@#{hashlib.blake2b(app_name.encode(), digest_size=8).hexdigest()}"


def check_queue_name(queue: object) -> None:
    """`ConfigurationError` unless `queue` can prefix its apps' queue names."""
    if not isinstance(queue, str) or not queue.strip() or "@" in queue:
        raise ConfigurationError(f"queue must be a non-empty string without '@', not {queue!r}")
    if len(queue) > MAX_QUEUE_NAME - 18:  # room for "@#" and a 16-digit hash
        raise ConfigurationError(f"queue must be at most {MAX_QUEUE_NAME - 18} characters")


def lock_keys(queue: str, user: UserKey, thread_id: str) -> tuple[str, str]:
    """(lock, queueing lock): JSON arrays, so no separator in a name can make two collide."""
    lock = json.dumps([queue, user.app_name, user.user_id], separators=(",", ":"))
    queueing = json.dumps([queue, user.app_name, user.user_id, thread_id], separators=(",", ":"))
    return lock, queueing


class Merge(str, Enum):
    """What a new payload does to the thread's pending job (same queueing lock)."""

    REPLACE = "replace"
    """The new one is as new or newer: it becomes the pending job's payload."""
    KEEP = "keep"
    """The new one is an older snapshot the pending job already covers."""
    SEPARATE = "separate"
    """Neither contains the other's last message (the history was rewritten between
    them): the new one is queued as a job of its own, after the pending one."""


def _last_key(messages: Sequence[BaseMessage]) -> bytes | None:
    return message_keys(messages[-1:]) if messages else None


def _contains(messages: Sequence[BaseMessage], key: bytes) -> bool:
    keys = message_keys(messages)
    return any(keys[i : i + KEY_BYTES] == key for i in range(0, len(keys), KEY_BYTES))


def merge(pending: Sequence[BaseMessage], new: Sequence[BaseMessage]) -> Merge:
    """Compare two payloads of one thread (see `Merge`)."""
    last_pending, last_new = _last_key(pending), _last_key(new)
    if last_pending is None or _contains(new, last_pending):
        return Merge.REPLACE
    if last_new is None or _contains(pending, last_new):
        return Merge.KEEP
    return Merge.SEPARATE
