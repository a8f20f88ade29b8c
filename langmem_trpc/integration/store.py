"""`MemoryStore`: the memory service as a LangGraph `BaseStore`.

For ecosystem code that speaks `BaseStore` (`compile(store=...)`, langmem's
tools and managers, `runtime.store`). Layout and mapping:

* namespace `(app_name, user_id, *scope)`: the first two labels are the
  service's `UserKey`, the rest a free scope;
* a caller-chosen key is stored under a stable memory id derived from
  (scope, key), so keys never collide across scopes;
* the memory text comes from the value's `memory`, `content` or `text` field
  (configurable; a nested dict such as langmem's `{"content": {"content": ...}}`
  is searched too), else the value's JSON; the full value, scope and key ride
  in the memory's metadata, so `get` returns the value unchanged;
* memories written by the worker or the tools appear under `(app, user)`
  with their memory id as key and a value describing the memory.

Deviations from `InMemoryStore` (tested in tests/integration/test_store.py):
no-query search is newest-updated first (not insertion order); query search
returns the service's relevance-ranked hits only (not every item);
`SearchItem.score` is the service's absolute 0-1 relevance; `created_at`
survives updates; `index=` is ignored (every memory is indexed); TTL is not
supported.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from copy import deepcopy
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    validate_op_namespace,
)

from .._time import parse_flexible_time
from ..service.protocol import MemoryService
from ..types import Entry, Kind, SearchOptions, Source, UserKey

__all__ = ["MemoryStore"]

logger = logging.getLogger(__name__)

_META = "langgraph_store"
_MAX_RESULTS = 1000
_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


class MemoryStore(BaseStore):
    """A LangGraph `BaseStore` over a `MemoryService` (sync and async).

    Example:
        ```python
        store = MemoryStore(SQLiteMemoryService("memories.db"))
        store.put(("shop", "alice"), "pref-1", {"memory": "Prefers email over phone"})
        store.search(("shop", "alice"), query="how to contact alice")
        ```

    Args:
        service: the memory service that stores everything.
        text_fields: value fields that hold the memory text, in order of preference.
    """

    supports_ttl = False

    def __init__(
        self, service: MemoryService, *, text_fields: Sequence[str] = ("memory", "content", "text")
    ) -> None:
        self.service = service
        self.text_fields = tuple(text_fields)

    # -- BaseStore ---------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        results: list[Result] = []
        for op in ops:
            validate_op_namespace(op)
            if isinstance(op, GetOp):
                results.append(self._get(op))
            elif isinstance(op, PutOp):
                self._put(op)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            else:
                raise TypeError(f"unknown store op {type(op).__name__}")
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        # One worker thread per batch: the service's blocking I/O stays off the loop.
        return await asyncio.to_thread(self.batch, list(ops))

    # -- ops ---------------------------------------------------------------------------

    def _get(self, op: GetOp) -> Item | None:
        user, scope = _split(op.namespace)
        entry = self.service.get(user, memory_id(scope, op.key))
        if entry is None and not scope:
            entry = self.service.get(user, op.key)
        if entry is None:
            return None
        item = to_item(entry)
        return item if item.namespace == tuple(op.namespace) and item.key == op.key else None

    def _put(self, op: PutOp) -> None:
        user, scope = _split(op.namespace)
        mid = memory_id(scope, op.key)
        source = Source(actor="store")
        if op.value is None:
            if not self.service.delete(user, mid, source=source) and not scope:
                existing = self.service.get(user, op.key)
                if existing is not None and _META not in existing.memory.metadata:
                    self.service.delete(user, op.key, source=source)
            return
        value = dict(op.value)
        self.service.add(
            user,
            memory_text(value, self.text_fields),
            memory_id=mid,
            metadata={_META: {"scope": list(scope), "key": op.key, "value": value}},
            source=source,
            **_memory_fields(value),
        )

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        query = (op.query or "").strip()
        found: list[tuple[Entry, Item]] = []
        for user in self._users(prefix):
            if query:
                options = SearchOptions(query=query, max_results=_MAX_RESULTS, hybrid=True)
                entries = self.service.search(user, query, options)
            else:
                entries = self.service.read(user)
            for entry in entries:
                item = to_item(entry)
                if item.namespace[: len(prefix)] == prefix and matches(item.value, op.filter):
                    found.append((entry, item))
        if query:
            found.sort(key=lambda pair: -(pair[0].score or 0.0))
        else:
            found.sort(key=lambda pair: pair[0].updated_at, reverse=True)
        window = found[op.offset : op.offset + op.limit]
        return [
            SearchItem(
                item.namespace,
                item.key,
                item.value,
                item.created_at,
                item.updated_at,
                entry.score if query else None,
            )
            for entry, item in window
        ]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        spaces: set[tuple[str, ...]] = set()
        for user in self.service.users():
            for entry in self.service.read(user):
                spaces.add(to_item(entry).namespace)
        selected = [
            ns for ns in spaces if all(_matches_condition(c, ns) for c in op.match_conditions or ())
        ]
        if op.max_depth is not None:
            selected = list({ns[: op.max_depth] for ns in selected})
        return sorted(selected)[op.offset : op.offset + op.limit]

    def _users(self, prefix: tuple[str, ...]) -> list[UserKey]:
        if len(prefix) >= 2:
            return [UserKey(prefix[0], prefix[1])]
        users = self.service.users(prefix[0] if prefix else None)
        return [u for u in users if (u.app_name, u.user_id)[: len(prefix)] == prefix]


# -- mapping between values and memories ----------------------------------------------------


def _split(namespace: Sequence[str]) -> tuple[UserKey, tuple[str, ...]]:
    if len(namespace) < 2:
        raise InvalidNamespaceError(
            f"MemoryStore namespaces are (app_name, user_id, *scope); got {tuple(namespace)!r}"
        )
    return UserKey(namespace[0], namespace[1]), tuple(namespace[2:])


def memory_id(scope: Sequence[str], key: str) -> str:
    """The stable memory id of a (scope, key) inside one user's memories."""
    digest = hashlib.sha256(json.dumps([list(scope), key], ensure_ascii=False).encode()).hexdigest()
    return "kv-" + digest[:32]


def memory_text(value: Mapping[str, Any], fields: Sequence[str]) -> str:
    """The searchable text of a value: the first text field (also nested), else its JSON."""
    for name in fields:
        field = value.get(name)
        if isinstance(field, str) and field.strip():
            return field
        if isinstance(field, Mapping):
            nested = next(
                (field[n] for n in fields if isinstance(field.get(n), str) and field[n].strip()),
                None,
            )
            if nested is not None:
                return str(nested)
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _memory_fields(value: Mapping[str, Any]) -> dict[str, Any]:
    """Memory fields a value carries in the service's own vocabulary (invalid ones ignored)."""
    out: dict[str, Any] = {}
    if value.get("kind") in (Kind.FACT.value, Kind.EPISODE.value):
        out["kind"] = value["kind"]
    topics = value.get("topics")
    if isinstance(topics, list) and all(isinstance(t, str) for t in topics):
        out["topics"] = topics
    participants = value.get("participants")
    if isinstance(participants, list) and all(isinstance(p, str) for p in participants):
        out["participants"] = participants
    if isinstance(value.get("location"), str):
        out["location"] = value["location"]
    event = value.get("event_time")
    if isinstance(event, str) and parse_flexible_time(event) is not None:
        out["event_time"] = parse_flexible_time(event)
    return out


def to_item(entry: Entry) -> Item:
    """The store view of a memory (store-written or not)."""
    stored = entry.memory.metadata.get(_META)
    base = (entry.app_name, entry.user_id)
    if isinstance(stored, Mapping):
        namespace = base + tuple(stored.get("scope") or ())
        return Item(
            value=deepcopy(dict(stored["value"])),
            key=str(stored["key"]),
            namespace=namespace,
            created_at=entry.created_at,
            updated_at=entry.updated_at,
        )
    memory = entry.memory
    value: dict[str, Any] = {
        "memory": memory.text,
        "kind": memory.kind.value,
        "topics": list(memory.topics),
    }
    if memory.event_time is not None:
        value["event_time"] = memory.event_time.isoformat()
    if memory.participants:
        value["participants"] = list(memory.participants)
    if memory.location:
        value["location"] = memory.location
    return Item(
        value=value,
        key=entry.id,
        namespace=base,
        created_at=entry.created_at,
        updated_at=entry.updated_at,
    )


# -- filters and namespace conditions ---------------------------------------------------------


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _operator(value: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(value == operand)
    if op == "$ne":
        return bool(value != operand)
    if op not in _OPERATORS:
        raise ValueError(f"unsupported filter operator {op!r}; use one of {list(_OPERATORS)}")
    left, right = _number(value), _number(operand)
    if left is None or right is None:  # compare numbers as numbers, text as text, never mixed
        if not (isinstance(value, str) and isinstance(operand, str)):
            return False
        left_s, right_s = value, operand
        return {
            "$gt": left_s > right_s,
            "$gte": left_s >= right_s,
            "$lt": left_s < right_s,
            "$lte": left_s <= right_s,
        }[op]
    return {"$gt": left > right, "$gte": left >= right, "$lt": left < right, "$lte": left <= right}[
        op
    ]


def _compare(value: Any, condition: Any) -> bool:
    if isinstance(condition, Mapping):
        if any(str(k).startswith("$") for k in condition):
            return all(_operator(value, op, operand) for op, operand in condition.items())
        return isinstance(value, Mapping) and all(
            _compare(value.get(k), v) for k, v in condition.items()
        )
    if isinstance(condition, (list, tuple)):
        return (
            isinstance(value, (list, tuple))
            and len(value) == len(condition)
            and all(_compare(v, c) for v, c in zip(value, condition, strict=False))
        )
    return bool(value == condition)


def matches(value: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    """InMemoryStore's filter semantics, except that ordering operators compare
    numbers numerically and strings lexically and never raise on mixed types."""
    return not filter or all(_compare(value.get(k), c) for k, c in filter.items())


def _matches_condition(condition: Any, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    pairs = (
        zip(namespace, path, strict=False)
        if condition.match_type == "prefix"
        else zip(reversed(namespace), reversed(path), strict=False)
    )
    return all(p == "*" or n == p for n, p in pairs)
