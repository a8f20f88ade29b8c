"""The `MemoryStore` class: dispatch, identity enforcement, writes and TTL."""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
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
    SearchOp,
    TTLConfig,
    validate_op_namespace,
)

from ...errors import InvalidInputError, NamespaceAccessError
from ...service.protocol import MemoryService
from ...types import Entry, Source, UserKey
from ..identity import authenticated_user_id
from . import _read
from ._reconcile import reconcile_put
from ._spaces import NamespaceCache
from ._ttl import TTLSweeper, deadline, needs_refresh, ttl_of
from ._values import (
    META,
    addresses,
    check_label,
    id_candidates,
    memory_fields,
    memory_id,
    memory_text,
    normalize_value,
    to_item,
)

_SOURCE = Source(actor="store")
_TTL_SOURCE = Source(actor="store:ttl")


@dataclass(frozen=True, slots=True)
class Access:
    """Whom one batch may touch: a pinned (app, user), an authenticated user id, or anyone."""

    app_name: str | None = None
    user_id: str | None = None

    def describe(self) -> str:
        if self.app_name is not None:
            return f"user {self.user_id!r} of app {self.app_name!r} only"
        return f"the authenticated user {self.user_id!r} only"

    def check(self, namespace: Sequence[str]) -> None:
        """Refuse a namespace (or prefix) that names another app or user."""
        labels = tuple(namespace)
        bad_app = self.app_name is not None and len(labels) >= 1 and labels[0] != self.app_name
        bad_user = self.user_id is not None and len(labels) >= 2 and labels[1] != self.user_id
        if bad_app or bad_user:
            raise NamespaceAccessError(labels, self.describe())

    def allows(self, user: UserKey) -> bool:
        return (self.app_name is None or user.app_name == self.app_name) and (
            self.user_id is None or user.user_id == self.user_id
        )


def _split(namespace: Sequence[str]) -> tuple[UserKey, tuple[str, ...]]:
    if len(namespace) < 2:
        raise InvalidNamespaceError(
            f"MemoryStore namespaces are (app_name, user_id, *scope); got {tuple(namespace)!r}"
        )
    for label in namespace[2:]:
        check_label("namespace", label)
    return UserKey(namespace[0], namespace[1]), tuple(namespace[2:])


class MemoryStore(BaseStore):
    """A LangGraph `BaseStore` over a `MemoryService` (sync and async).

    Args:
        text_fields: value fields that hold the memory text, in order of preference.
        reconcile: run the worker's "merge_similar" reconcile on a put under a
            new key (a paraphrase updates the existing memory); off by default.
        ttl: LangGraph's `TTLConfig` (`default_ttl` minutes, `refresh_on_read`,
            `sweep_interval_minutes`).
        min_score: opt-in relevance floor for query search (0-1); by default a
            query search returns the `limit` best items, as `InMemoryStore` does.
    """

    supports_ttl = True

    def __init__(
        self,
        service: MemoryService,
        *,
        text_fields: Sequence[str] = ("memory", "content", "text"),
        reconcile: bool = False,
        ttl: TTLConfig | None = None,
        min_score: float | None = None,
    ) -> None:
        if min_score is not None and not 0.0 <= min_score <= 1.0:
            raise InvalidInputError("min_score", "must be between 0 and 1")
        self.service = service
        self.text_fields = tuple(text_fields)
        self.reconcile = reconcile
        self.ttl_config = ttl
        self.min_score = min_score
        self._pinned: UserKey | None = None
        self._sweeper: TTLSweeper | None = None
        self.namespaces = NamespaceCache()
        """Per-user namespace sets for `list_namespaces` (see `_spaces`)."""

    def for_user(self, app_name: str, user_id: str) -> MemoryStore:
        """A view of this store that only reaches `(app_name, user_id)` (another app or
        user raises `NamespaceAccessError`); it shares the service and runs no sweeper."""
        view = copy.copy(self)
        view._pinned = UserKey(app_name, user_id)
        view._sweeper = None
        return view

    # -- BaseStore ---------------------------------------------------------------

    def _access(self) -> Access | None:
        auth = authenticated_user_id()
        if self._pinned is not None:
            if auth is not None and auth != self._pinned.user_id:
                raise NamespaceAccessError(
                    (self._pinned.app_name, self._pinned.user_id),
                    Access(None, auth).describe(),
                )
            return Access(self._pinned.app_name, self._pinned.user_id)
        return Access(None, auth) if auth is not None else None

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        access = self._access()
        for op in ops:  # refuse the whole batch before any op runs
            validate_op_namespace(op)
            if access is not None and not isinstance(op, ListNamespacesOp):
                access.check(op.namespace_prefix if isinstance(op, SearchOp) else op.namespace)
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(op))
            elif isinstance(op, PutOp):
                self._put(op)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(_read.search(self, op, access))
            elif isinstance(op, ListNamespacesOp):
                results.append(_read.list_namespaces(self, op, access))
            else:
                raise TypeError(f"unknown store op {type(op).__name__}")
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        # One worker thread per batch (it copies the context, so the run's identity
        # is seen): the service's blocking I/O stays off the loop.
        return await asyncio.to_thread(self.batch, list(ops))

    # -- ops ---------------------------------------------------------------------------

    def resolve(self, user: UserKey, scope: Sequence[str], key: str) -> Entry | None:
        """The live memory (scope, key) names, if any (see `_values.id_candidates`)."""
        check_label("key", key)
        for position, mid in enumerate(id_candidates(scope, key)):
            try:
                entry = self.service.get(user, mid)
            except InvalidInputError:
                if position == 0:
                    raise
                continue  # the key is not a valid memory id: it names no foreign memory
            if entry is not None and addresses(entry, scope, key):
                return entry
        return None

    def _get(self, op: GetOp) -> Item | None:
        user, scope = _split(op.namespace)
        entry = self.resolve(user, scope, op.key)
        if entry is None:
            return None
        if op.refresh_ttl:
            self.refresh([entry])
        return to_item(entry)

    def _put(self, op: PutOp) -> None:
        user, scope = _split(op.namespace)
        existing = self.resolve(user, scope, op.key)
        if op.value is None:
            if existing is not None:
                self.service.delete(user, existing.id, source=_SOURCE)
            return
        value = normalize_value(op.value)
        limits = self.service.limits
        paths = list(op.index) if isinstance(op.index, list) else None
        text = memory_text(value, self.text_fields, limits.max_text_length, paths)
        fields = memory_fields(value, limits)
        meta: dict[str, Any] = {"scope": list(scope), "key": op.key, "value": value}
        if op.index is False:
            meta["index"] = False
        if op.ttl is not None:
            meta["ttl"] = float(op.ttl)
            deadline(op.ttl)  # one ending past year 9999 is refused before anything is written
        source = _SOURCE
        if existing is None and self.reconcile and op.index is not False:
            absorbed = reconcile_put(self.service, user, scope, text, fields)
            source = _SOURCE.with_decision(absorbed.decision)
            if absorbed.target is not None:
                if not absorbed.updated:
                    return
                existing, fields["topics"] = absorbed.target, absorbed.topics
        if existing is not None:
            meta["key"] = to_item(existing).key  # the surviving memory keeps its key
        entry = self.service.add(
            user,
            text,
            memory_id=existing.id if existing is not None else memory_id(scope, op.key),
            metadata={META: meta},
            source=source,
            **fields,
        )
        at = deadline(op.ttl)
        if entry.expires_at != at:  # a new TTL, or an old one this put replaces
            self.service.set_expiry(user, entry.id, at)

    # -- TTL -----------------------------------------------------------------------------

    def refresh(self, entries: Iterable[Entry]) -> None:
        """Push the expiry of items read with `refresh_ttl` forward (see `_ttl`)."""
        for entry in entries:
            if needs_refresh(entry):
                self.service.set_expiry(entry.user, entry.id, deadline(ttl_of(entry)))

    def sweep_ttl(self) -> int:
        """Soft-delete every expired memory (history actor "store:ttl"); returns how many."""
        removed = 0
        users = [self._pinned] if self._pinned is not None else self.service.users()
        for user in users:
            for expired_id in self.service.expired(user):
                removed += bool(self.service.delete(user, expired_id, source=_TTL_SOURCE))
        return removed

    async def asweep_ttl(self) -> int:
        return await asyncio.to_thread(self.sweep_ttl)

    def start_ttl_sweeper(
        self, sweep_interval_minutes: int | None = None
    ) -> concurrent.futures.Future[None]:
        """Sweep expired items every `sweep_interval_minutes` (else the TTLConfig's, else 5).

        As in LangGraph's stores, without a TTLConfig or an interval the returned
        future is already done; else it completes when the sweeper stops.
        """
        interval = sweep_interval_minutes or (self.ttl_config or {}).get("sweep_interval_minutes")
        if not interval and not self.ttl_config:
            done: concurrent.futures.Future[None] = concurrent.futures.Future()
            done.set_result(None)
            return done
        if self._sweeper is None:
            self._sweeper = TTLSweeper(self.sweep_ttl, interval or 5)
        return self._sweeper.start()

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the background sweep; True when it has stopped (or never ran)."""
        return self._sweeper.stop(timeout) if self._sweeper is not None else True

    def close(self) -> None:
        """Stop the TTL sweeper and drop cached namespaces; the service stays open."""
        self.stop_ttl_sweeper()
        self.namespaces.clear()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
