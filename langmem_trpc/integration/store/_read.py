"""`ReadableStore` reads: search (query and no query) and namespace listing.

Bounded by the index: a prefix naming one user reads only that user's rows,
and reads ask the backend for `offset + limit`, widening only when filters or
scopes leave too few. Query search keeps the service's hybrid order (several
users' lists merged by score, each keeping its order).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping
from itertools import islice, takewhile
from typing import TYPE_CHECKING, Any, Protocol

from langgraph.store.base import ListNamespacesOp, SearchItem, SearchOp

from ...types import Entry, SearchOptions, UserKey
from ._filters import matches, matches_condition
from ._values import indexed, namespace_of, store_meta, to_item

if TYPE_CHECKING:
    from ...service.protocol import MemoryService
    from ._access import Access
    from ._spaces import NamespaceCache


class ReadableStore(Protocol):
    """What a read needs of `_store.MemoryStore` (named here, so that the store imports
    its reads and the reads do not import the store back)."""

    @property
    def service(self) -> MemoryService: ...
    @property
    def min_score(self) -> float | None: ...
    @property
    def namespaces(self) -> NamespaceCache: ...
    def refresh(self, entries: Iterable[Entry]) -> None: ...


_MAX_RESULTS = 1000
_MIN_READ = 32


def _value_of(entry: Entry) -> Mapping[str, Any]:
    stored = store_meta(entry)
    return stored["value"] if stored is not None else to_item(entry).value


def _fits(entry: Entry, prefix: tuple[str, ...], filter: Mapping[str, Any] | None) -> bool:
    return namespace_of(entry)[: len(prefix)] == prefix and matches(_value_of(entry), filter)


def users_for(
    store: ReadableStore, prefix: tuple[str, ...], access: Access | None
) -> list[UserKey]:
    """The users a prefix can reach, never outside `access`."""
    if len(prefix) >= 2:
        users = [UserKey(prefix[0], prefix[1])]
    else:
        app = prefix[0] if prefix else None
        if access is not None and access.app_name is not None:
            app = access.app_name
        users = [u for u in store.service.users(app) if (u.app_name,)[: len(prefix)] == prefix]
    return [u for u in users if access is None or access.allows(u)]


def _recent(
    store: ReadableStore,
    user: UserKey,
    prefix: tuple[str, ...],
    filter: Mapping[str, Any] | None,
    need: int,
) -> list[Entry]:
    """The user's `need` newest fitting items, reading no more rows than it must."""
    narrowed = len(prefix) > 2 or bool(filter)
    limit = max(need * 2, _MIN_READ) if narrowed else max(need, 1)
    while True:
        entries = store.service.read(user, limit)
        fitting = [e for e in entries if _fits(e, prefix, filter)]
        if len(fitting) >= need or len(entries) < limit:
            return fitting[:need]
        limit *= 4


def _ranked(
    store: ReadableStore, user: UserKey, op: SearchOp, prefix: tuple[str, ...], need: int
) -> list[tuple[Entry, float]]:
    """The user's best `need` items for the query, then (no floor) the newest others;
    widens x4 (up to 1,000) while too few fit and the service filled its page."""
    narrowed = len(prefix) > 2 or bool(op.filter)
    floor = store.min_score
    size = min(max(need * 4 if narrowed else need, 1), _MAX_RESULTS)
    while True:
        options = SearchOptions(max_results=size, similarity_threshold=floor or 0.0, hybrid=True)
        hits = store.service.search(user, (op.query or "").strip(), options)
        ranked = [(e, e.score or 0.0) for e in hits if indexed(e) and _fits(e, prefix, op.filter)]
        if len(ranked) >= need or len(hits) < size or size >= _MAX_RESULTS:
            break
        size = min(size * 4, _MAX_RESULTS)
    if floor is None and len(ranked) < need:  # InMemoryStore returns its best hits, never fewer
        seen = {e.id for e, _ in ranked}
        ranked.extend(
            (e, 0.0)
            for e in _recent(store, user, prefix, op.filter, need + len(seen))
            if e.id not in seen and indexed(e)
        )
    return ranked[:need]


def search(store: ReadableStore, op: SearchOp, access: Access | None) -> list[SearchItem]:
    prefix = tuple(op.namespace_prefix)
    need = op.offset + op.limit
    users = users_for(store, prefix, access)
    window: list[tuple[Entry, float | None]]
    if (op.query or "").strip():
        lists = [_ranked(store, u, op, prefix, need) for u in users]
        merged: Iterator[tuple[Entry, float | None]] = heapq.merge(
            *lists, key=lambda pair: -(pair[1] or 0.0)
        )
        window = list(islice(merged, op.offset, need))
    else:
        recents = [_recent(store, u, prefix, op.filter, need) for u in users]
        newest = heapq.merge(*recents, key=lambda e: e.updated_at, reverse=True)
        window = [(e, None) for e in islice(newest, op.offset, need)]
    if op.refresh_ttl:
        store.refresh(e for e, _ in window)
    items = [(to_item(entry), score) for entry, score in window]
    return [
        SearchItem(i.namespace, i.key, i.value, i.created_at, i.updated_at, s) for i, s in items
    ]


def _shallow(op: ListNamespacesOp) -> bool:
    """Whether the users alone answer the listing (no scope label can matter)."""
    depth = op.max_depth
    return (
        depth is not None
        and depth <= 2
        and all(
            c.match_type == "prefix" and len(c.path) <= depth for c in op.match_conditions or ()
        )
    )


def _listing_prefix(op: ListNamespacesOp) -> tuple[str, ...]:
    """The literal leading labels of the prefix condition (to pick users by index)."""
    for condition in op.match_conditions or ():
        if condition.match_type == "prefix":
            return tuple(takewhile(lambda label: label != "*", condition.path[:2]))
    return ()


def list_namespaces(
    store: ReadableStore, op: ListNamespacesOp, access: Access | None
) -> list[tuple[str, ...]]:
    prefix = _listing_prefix(op)
    users = users_for(store, prefix, access)
    if not _shallow(op):  # a user without live items has no namespace
        spaces = set().union(*(store.namespaces.spaces(store.service, u) for u in users))
    elif len(prefix) >= 2:  # named by the prefix, not found in the index: look it up
        spaces = {(u.app_name, u.user_id) for u in users if store.service.read(u, 1)}
    else:
        spaces = {(u.app_name, u.user_id) for u in users}
    selected = [
        ns for ns in spaces if all(matches_condition(c, ns) for c in op.match_conditions or ())
    ]
    if op.max_depth is not None:
        selected = list({ns[: op.max_depth] for ns in selected})
    return sorted(selected)[op.offset : op.offset + op.limit]
