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

from langchain_core.messages import BaseMessage, messages_from_dict, messages_to_dict

from ..errors import ConfigurationError, InvalidInputError, QueuePayloadTooLargeError
from ..extraction.delta import KEY_BYTES, compute_delta, message_keys
from ..extraction.job import _has_work as has_work  # the job's own peek test, shared
from ..types import ExtractionCursor, UserKey

FORMAT = 1
"""Version of the job arguments' layout (`v`)."""
MAX_QUEUE_NAME = 128
"""procrastinate's `queue_name` is a varchar(128)."""


def select_messages(payload: JobPayload, cursor: ExtractionCursor | None) -> JobPayload | None:
    """The anchor and the delta of the thread in `payload` after `cursor`; None when there
    is no work (`run_job`'s peek test: nothing new or unread, no dead letter to retry)."""
    delta = compute_delta(payload.messages, cursor)
    if not has_work(payload.messages, delta, cursor):
        return None
    start = max(0, delta.start - 1)
    window = payload.messages[start:]
    return JobPayload(payload.user, payload.thread_id, window, payload.offset + start)


@dataclass(frozen=True)
class JobPayload:
    """The arguments of one queued job, decoded."""

    user: UserKey
    thread_id: str
    messages: tuple[BaseMessage, ...]
    offset: int = 0
    """Index of `messages[0]` in the thread, so the cursor a job writes counts the
    thread's messages (`ExtractionCursor.message_count`), not the payload's."""

    def chunked_json(self, cap: int) -> list[str]:
        """The arguments as JSON text, in as many jobs as `cap` bytes each needs.

        Each chunk after the first starts with the previous one's last message as its
        anchor, so chunk k finds its delta once chunk k - 1 moved the cursor. A message
        that cannot fit in a job (with the anchor before it) raises
        `QueuePayloadTooLargeError`. Values JSON has no type for (a `datetime` in
        `additional_kwargs`, ...) are written as their ISO 8601 text, others as `str()`.
        """
        dicts = messages_to_dict(list(self.messages))
        whole = self._text(dicts, 0)
        if len(whole.encode()) <= cap:
            return [whole]
        base = len(self._text([], 0).encode())
        sizes = [len(_dumps(d).encode()) + 1 for d in dicts]  # + its comma
        texts: list[str] = []
        start = 0
        while True:
            end, size = start + 1, base + sizes[start]
            while end < len(dicts) and size + sizes[end] <= cap:
                size, end = size + sizes[end], end + 1
            if size > cap:  # only the first message: a later start fit beside its predecessor
                raise QueuePayloadTooLargeError(size, cap, 1)
            if end == start + 1 and end < len(dicts):  # no room beside it for the next one:
                raise QueuePayloadTooLargeError(size + sizes[end], cap, 2)  # no progress
            texts.append(self._text(dicts[start:end], start))
            if end == len(dicts):
                return texts
            start = end - 1

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
