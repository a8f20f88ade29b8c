"""A past conversation as the backfill sees it, and reading one from a LangGraph checkpointer.

Identity is read from the thread's newest checkpoint exactly as `MemoryCheckpointer`
reads it from a run (`resolve_identity`): savers copy the run's scalar `configurable`
keys (`user_id`, `app_name`, `langgraph_auth_user_id`) into the stored metadata. A
message's time is its own (`message_time`), else the `ts` of the oldest checkpoint of
the thread that holds it (found by walking the history oldest first, only when some
message has no time of its own); that time is written into the message's
`additional_kwargs["timestamp"]`, so every later step (batching at idle gaps, the
reference date, episodes' event times) reads it like a live message's own time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from langchain_core.messages import BaseMessage

from .._time import parse_flexible_time
from ..extraction.delta import KEY_BYTES, message_keys, message_time
from ..integration.identity import resolve_identity
from ..types import UserKey

logger = logging.getLogger(__name__)

IdentityMap = Callable[[str, Mapping[str, Any]], "UserKey | None"]
"""A caller's mapping: (thread id, the newest checkpoint's metadata) to the thread's user."""

TIME_KEY = "timestamp"


@dataclass(frozen=True)
class HistoryThread:
    """One past conversation: whose it is, its id, and its messages with their times."""

    user: UserKey
    thread_id: str
    messages: tuple[BaseMessage, ...]

    @property
    def started(self) -> datetime | None:
        """The time of its first dated message (threads of a user run oldest first)."""
        return next((t for t in map(message_time, self.messages) if t is not None), None)

    @property
    def ended(self) -> datetime | None:
        """The time of its last dated message (`since` / `until` select on it)."""
        times = [t for t in map(message_time, self.messages) if t is not None]
        return max(times) if times else None


@dataclass(frozen=True)
class SkippedThread:
    """A thread the backfill cannot take, and why (reported, never extracted)."""

    thread_id: str
    reason: str


def stamped(message: BaseMessage, when: datetime | None) -> BaseMessage:
    """`message` with `when` as its own time, unless it has one (a copy; the original stays)."""
    if when is None or message_time(message) is not None:
        return message
    kwargs = {**message.additional_kwargs, TIME_KEY: when.isoformat()}
    return message.model_copy(update={"additional_kwargs": kwargs})


def thread_config(thread_id: str) -> dict[str, Any]:
    """The config that lists one thread's root-graph checkpoints."""
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


THREADS_SQL = (
    "SELECT thread_id, min(checkpoint_id) AS first FROM checkpoints "
    "WHERE checkpoint_ns = '' GROUP BY thread_id ORDER BY 2"
)
"""SqliteSaver's and PostgresSaver's table (same layout): each root thread, oldest first."""


def stored_thread_ids(saver: Any) -> list[str] | None:
    """A `SqliteSaver`'s or `PostgresSaver`'s thread ids in one query, instead of loading
    every checkpoint through `list(None)`; None for any other saver (or if the query fails)."""
    kind = type(saver)
    module = kind.__module__
    try:
        if module.startswith("langgraph.checkpoint.sqlite") and kind.__name__ == "SqliteSaver":
            with saver.cursor(transaction=False) as cur:
                return [str(row[0]) for row in cur.execute(THREADS_SQL).fetchall()]
        if module.startswith("langgraph.checkpoint.postgres") and kind.__name__ == "PostgresSaver":
            with saver._cursor() as cur:
                cur.execute(THREADS_SQL)
                return [str(row["thread_id"]) for row in cur.fetchall()]
    except Exception as exc:  # another layout: the generic way
        logger.debug("listing threads by query failed (%s); using list(None)", exc)
    return None


def thread_ids(tuples: Any) -> list[str]:
    """Distinct thread ids of `saver.list(None)`'s checkpoints, in the order first seen."""
    seen: dict[str, None] = {}
    for item in tuples:
        tid = (item.config.get("configurable") or {}).get("thread_id")
        if tid:
            seen.setdefault(str(tid), None)
    return list(seen)


def identity_of(
    thread_id: str,
    metadata: Mapping[str, Any],
    *,
    identity: IdentityMap | None,
    app_name: str | None,
) -> UserKey | None:
    """The thread's user: the caller's mapping, else the hook's resolver on the stored run."""
    if identity is not None:
        return identity(thread_id, metadata)
    configurable = {k: v for k, v in metadata.items() if isinstance(v, str)}
    configurable["thread_id"] = thread_id
    return resolve_identity(config={"configurable": configurable}, default_app_name=app_name)


def first_seen(history: Sequence[Any], key: str) -> dict[bytes, datetime]:
    """Each message key's first checkpoint `ts`, walking `history` (newest first) oldest first."""
    found: dict[bytes, datetime] = {}
    for item in reversed(history):
        when = parse_flexible_time(str(item.checkpoint.get("ts") or ""))
        value = item.checkpoint.get("channel_values", {}).get(key)
        if when is None or not isinstance(value, list):
            continue
        keys = message_keys([m for m in value if isinstance(m, BaseMessage)])
        for index in range(0, len(keys), KEY_BYTES):
            found.setdefault(keys[index : index + KEY_BYTES], when)
    return found


def thread_from_history(
    thread_id: str,
    history: Sequence[Any],
    *,
    identity: IdentityMap | None = None,
    app_name: str | None = None,
    messages_key: str = "messages",
) -> HistoryThread | SkippedThread:
    """The thread whose root checkpoints `saver.list(thread_config(id))` gave (newest first)."""
    if not history:
        return SkippedThread(thread_id, "no root-graph checkpoint")
    latest = history[0]
    value = latest.checkpoint.get("channel_values", {}).get(messages_key)
    if not isinstance(value, list):
        return SkippedThread(thread_id, f"its latest state has no {messages_key!r} list")
    messages = [m for m in value if isinstance(m, BaseMessage)]
    user = identity_of(thread_id, latest.metadata or {}, identity=identity, app_name=app_name)
    if user is None:
        return SkippedThread(thread_id, "no identity (user_id / app_name) in its checkpoints")
    if not messages:
        return SkippedThread(thread_id, "no messages")
    if any(message_time(m) is None for m in messages):
        times = first_seen(history, messages_key)
        fallback = parse_flexible_time(str(latest.checkpoint.get("ts") or ""))
        keys = message_keys(messages)
        messages = [
            stamped(m, times.get(keys[i * KEY_BYTES : (i + 1) * KEY_BYTES], fallback))
            for i, m in enumerate(messages)
        ]
    return HistoryThread(user, thread_id, tuple(messages))
