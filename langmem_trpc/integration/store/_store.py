"""The `MemoryStore` class: dispatch, identity enforcement, writes and TTL."""

from __future__ import annotations

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

from ...errors import InvalidInputError
from ...service.plans import update as update_plan
from ...service.protocol import MemoryService
from ...service.rules import MemoryPatch, build_memory
from ...types import Entry, Source, UserKey
from . import _read
from ._access import access_for
from ._lane import OrderedLane
from ._reconcile import reconcile_put
from ._spaces import NamespaceCache
from ._ttl import Stopped, SweeperFuture, TTLSweeper, deadline, needs_refresh, ttl_of
from ._values import (
    META,
    ValueBounds,
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
class _Put:
    """A put checked before anything in its batch runs: the value normalised and
    bounded, the text and fields the service will accept (None value: a delete)."""

    op: PutOp
    user: UserKey
    scope: tuple[str, ...]
    value: dict[str, Any] | None = None
    text: str = ""
    fields: dict[str, Any] | None = None


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
        max_value_bytes: the largest value a put accepts, as JSON in UTF-8 bytes.
        max_value_keys: the most dict keys (at every depth) a put's value may hold.
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
        max_value_bytes: int = 1_000_000,
        max_value_keys: int = 10_000,
    ) -> None:
        if min_score is not None and not 0.0 <= min_score <= 1.0:
            raise InvalidInputError("min_score", "must be between 0 and 1")
        for name, bound in (
            ("max_value_bytes", max_value_bytes),
            ("max_value_keys", max_value_keys),
        ):
            if isinstance(bound, bool) or not isinstance(bound, int) or bound < 1:
                raise InvalidInputError(name, "must be a positive integer")
        self.service = service
        self.text_fields = tuple(text_fields)
        self.reconcile = reconcile
        self.ttl_config = ttl
        self.min_score = min_score
        self.value_bounds = ValueBounds(max_value_bytes, max_value_keys)
        self._pinned: UserKey | None = None
        self._sweeper: TTLSweeper | None = None
        self._lane = OrderedLane()
        self.namespaces = NamespaceCache()
        """Per-user namespace sets for `list_namespaces` (see `_spaces`)."""

    def for_user(self, app_name: str, user_id: str) -> MemoryStore:
        """A view of this store that only reaches `(app_name, user_id)` (another app or
        user raises `NamespaceAccessError`); it shares the service, the async lane and
        runs no sweeper."""
        view = copy.copy(self)
        view._pinned = UserKey(app_name, user_id)
        view._sweeper = None
        return view

    # -- BaseStore ---------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run a batch as `InMemoryStore` does: every op is checked first (a refused
        op refuses the batch before anything is read or written); reads answer from
        the state before the batch; then the puts, the last per (namespace, key)."""
        ops = list(ops)
        access = access_for(self._pinned)
        for op in ops:
            if not isinstance(op, (GetOp, PutOp, SearchOp, ListNamespacesOp)):
                raise TypeError(f"unknown store op {type(op).__name__}")
            validate_op_namespace(op)
            if access is not None and not isinstance(op, ListNamespacesOp):
                access.check(op.namespace_prefix if isinstance(op, SearchOp) else op.namespace)
        puts: dict[tuple[tuple[str, ...], str], _Put] = {}
        for op in ops:
            if isinstance(op, PutOp):
                puts.pop((op.namespace, op.key), None)  # the last put of a key is applied last
                puts[(op.namespace, op.key)] = self._prepare(op)
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(op))
            elif isinstance(op, SearchOp):
                results.append(_read.search(self, op, access))
            elif isinstance(op, ListNamespacesOp):
                results.append(_read.list_namespaces(self, op, access))
            else:
                results.append(None)
        for put in puts.values():
            self._apply(put)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """`batch` in the store's ordered lane (see `_lane`): batches apply in the
        order they were issued, off the event loop, with the caller's context."""
        ops = list(ops)
        return await self._lane.run(lambda: self.batch(ops))

    # -- ops ---------------------------------------------------------------------------

    def resolve(self, user: UserKey, scope: Sequence[str], key: str) -> Entry | None:
        """The live, current memory (scope, key) names, if any (see `_values.id_candidates`)."""
        check_label("key", key)
        for position, mid in enumerate(id_candidates(scope, key)):
            try:
                entry = self.service.get(user, mid)
            except InvalidInputError:
                if position == 0:
                    raise
                continue  # the key is not a valid memory id: it names no foreign memory
            if entry is not None and addresses(entry, scope, key):
                return self._current(user, entry)
        return None

    def _current(self, user: UserKey, entry: Entry) -> Entry | None:
        """The current version of an item's memory: a supersede (`reconcile=True`) moved
        the item to a newer memory, found through `superseded_by`; None when deleted."""
        seen = {entry.id}
        while entry.superseded_by is not None and entry.superseded_by not in seen:
            newer = self.service.get(user, entry.superseded_by)
            if newer is None:
                return None
            seen.add(newer.id)
            entry = newer
        return entry

    def _get(self, op: GetOp) -> Item | None:
        user, scope = _split(op.namespace)
        entry = self.resolve(user, scope, op.key)
        if entry is None:
            return None
        if op.refresh_ttl:
            self.refresh([entry])
        return to_item(entry)

    def _prepare(self, op: PutOp) -> _Put:
        """Every check a put needs that reads nothing: the value, its bounds, the
        text and fields the service would accept."""
        user, scope = _split(op.namespace)
        check_label("key", op.key)
        if op.value is None:
            return _Put(op, user, scope)
        value = normalize_value(op.value, self.value_bounds)
        limits = self.service.limits
        paths = list(op.index) if isinstance(op.index, list) else None
        text = memory_text(value, self.text_fields, limits.max_text_length, paths)
        fields = memory_fields(value, limits)
        build_memory(text, limits=limits, **fields)  # the service's own checks, up front
        return _Put(op, user, scope, value, text, fields)

    def _apply(self, put: _Put) -> None:
        op, user, scope = put.op, put.user, put.scope
        existing = self.resolve(user, scope, op.key)
        if put.value is None:
            if existing is not None:
                self.service.delete(user, existing.id, source=_SOURCE)
            return
        fields = dict(put.fields or {})
        meta: dict[str, Any] = {"scope": list(scope), "key": op.key, "value": put.value}
        if op.index is False:
            meta["index"] = False
        if op.ttl is not None:
            meta["ttl"] = float(op.ttl)
            deadline(op.ttl)  # one ending past year 9999 is refused before anything is written
        source, absorbed = _SOURCE, None
        if existing is None and self.reconcile and op.index is not False:
            absorbed = reconcile_put(self.service, user, scope, put.text, fields)
            source = _SOURCE.with_decision(absorbed.decision)
            if absorbed.target is not None:
                if not absorbed.updated:
                    return
                existing, fields["topics"] = absorbed.target, absorbed.topics
        if existing is not None:
            meta["key"] = to_item(existing).key  # the surviving memory keeps its key
        if absorbed is not None and absorbed.supersede and existing is not None:
            # a changed fact: a new version under a new id keeps the key; the old one is closed
            entry = self._supersede(user, existing.id, put.text, meta, source, fields)
        else:
            key_id = existing.id if existing is not None else memory_id(scope, op.key)
            entry = self.service.add(
                user, put.text, memory_id=key_id, metadata={META: meta}, source=source, **fields
            )
        at = deadline(op.ttl)
        if entry.expires_at != at:  # a new TTL, or an old one this put replaces
            self.service.set_expiry(user, entry.id, at)

    def _supersede(
        self,
        user: UserKey,
        memory_id: str,
        text: str,
        meta: dict[str, Any],
        source: Source,
        fields: dict[str, Any],
    ) -> Entry:
        """`update(..., supersede=True)` of a keyed item: allowed here (the service
        refuses it) since the store follows `superseded_by` from the key (`_current`)."""
        patch = MemoryPatch(text, metadata={META: meta}, **fields)
        limits = self.service.limits
        plan = update_plan(
            user,
            memory_id,
            patch,
            limits=limits,
            source=source,
            supersede=True,
            keyed_versions=True,
        )
        return self.service.run_plan(plan)

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
        return await self._lane.run(self.sweep_ttl)

    def start_ttl_sweeper(self, sweep_interval_minutes: int | None = None) -> SweeperFuture:
        """Sweep expired items every `sweep_interval_minutes` (else the TTLConfig's, else 5).

        As in LangGraph's stores, without a TTLConfig or an interval the returned
        future is already done; else it completes when the sweeper stops. It can be
        awaited too (`await store.start_ttl_sweeper()`, as with LangGraph's async
        stores), which gives the future back at once.
        """
        interval = sweep_interval_minutes or (self.ttl_config or {}).get("sweep_interval_minutes")
        if not interval and not self.ttl_config:
            done = SweeperFuture()
            done.set_result(None)
            return done
        if self._sweeper is None:
            self._sweeper = TTLSweeper(self.sweep_ttl, interval or 5)
        return self._sweeper.start()

    def stop_ttl_sweeper(self, timeout: float | None = None) -> Stopped:
        """Stop the background sweep; true when it has stopped (or never ran).
        Awaitable too, like LangGraph's async stores' `stop_ttl_sweeper`."""
        return Stopped(self._sweeper.stop(timeout) if self._sweeper is not None else True)

    def close(self) -> None:
        """Stop the TTL sweeper and the async lane, drop cached namespaces; the service
        stays open."""
        self.stop_ttl_sweeper()
        self._lane.close()
        self.namespaces.clear()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
