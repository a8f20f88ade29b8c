"""Execute a reconciled batch against the service, in order, one op at a time.

Rules (spec 3.7, plus what stable ids need): an update of a missing id becomes
an add (when add is enabled); a delete of a missing id is ignored; an update
whose new text already exists as another memory (`MemoryConflictError`) is a
duplicate, so its now-redundant source memory is deleted; an idempotent add
counts as a duplicate. A failed op is logged and counted and the rest go on:
an invalid input (`InvalidInputError`, `ValueError`, `TypeError`,
`ArithmeticError`) skips that op only; a `BackendError` or unknown error also
marks the job for retry (the cursor stays; every op is safe to replay).

Each write records the batch's `Source` with the op's decision: the policy's
label (`MemoryOp.decision`), else its action; "add:update-target-missing"
when an update of a missing id became an add.

Validity: every add and supersede passes `valid_from` = the op's event time, else
the time of the batch's messages (`execute_ops(when=)`), else the service's now;
`valid_until` as the model said it, dropped with a warning when it is not after
that start or the service refuses it (the write is then made without it). The
model's own update call (no policy decision) is settled here against the stored
memory (extraction/supersede.py): a change of state of a fact supersedes it
("supersede:model change=..."), anything else updates in place. A supersede
whose new text another current memory holds, or whose target a newer version
already replaced, is a duplicate: nothing is deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone

from ..errors import (
    BackendError,
    InvalidInputError,
    LangmemTrpcError,
    MemoryConflictError,
    MemoryNotFoundError,
)
from ..service.protocol import MemoryService
from ..types import Entry, Kind, Source, UserKey
from .ops import Action, MemoryOp
from .supersede import MODEL, settle

__all__ = ["OpOutcome", "execute_ops"]

logger = logging.getLogger(__name__)

_INVALID = (ValueError, TypeError, ArithmeticError)
"""Exception types that mean "this op's input is invalid", whoever raised them."""


@dataclass(frozen=True)
class OpOutcome:
    """What one operation did; `result`: added, updated, superseded (a new version, its
    id in `memory_id`), deleted, cleared, duplicate, missing, disabled or failed."""

    op: MemoryOp
    result: str
    memory_id: str | None = None
    count: int = 1
    error: str | None = None
    retry: bool = False


def _validity(op: MemoryOp, when: datetime | None) -> tuple[datetime | None, datetime | None]:
    """`valid_from` and `valid_until` for a write of `op` (see the module docstring)."""
    start = op.event_time or when
    until = op.valid_until
    if until is not None and until <= (start or datetime.now(timezone.utc)):
        logger.warning(
            "auto_memory: valid_until %s of %r is not after its start %s; ignored",
            until.isoformat(),
            op.text[:80],
            (start or datetime.now(timezone.utc)).isoformat(),
        )
        until = None
    return start, until


def _add(
    service: MemoryService, user: UserKey, op: MemoryOp, source: Source, when: datetime | None
) -> OpOutcome:
    started = datetime.now(timezone.utc)
    valid_from, valid_until = _validity(op, when)
    entry: Entry = service.add(
        user,
        op.text,
        topics=list(op.topics),
        kind=op.kind or Kind.FACT,
        event_time=op.event_time,
        participants=list(op.participants),
        location=op.location,
        source=source,
        valid_from=valid_from,
        valid_until=valid_until,
    )
    fresh = entry.updated_at >= started
    return OpOutcome(op, "added" if fresh else "duplicate", entry.id)


def _settle_model_update(service: MemoryService, user: UserKey, op: MemoryOp) -> MemoryOp:
    """The model's own update call (no policy decision), settled against the stored memory."""
    if op.decision is not None or op.supersede or op.memory_id is None:
        return op
    old = service.get(user, op.memory_id)
    return op if old is None else settle(op, old, MODEL, service.language)


def _update(
    service: MemoryService,
    user: UserKey,
    op: MemoryOp,
    source: Source,
    actions: Collection[Action],
    when: datetime | None,
) -> OpOutcome:
    assert op.memory_id is not None
    valid_from, valid_until = _validity(op, when)
    try:
        entry = service.update(
            user,
            op.memory_id,
            op.text,
            topics=list(op.topics) or None,
            kind=op.kind,
            event_time=op.event_time,
            participants=list(op.participants) or None,
            location=op.location,
            source=source,
            supersede=op.supersede,
            valid_from=valid_from if op.supersede else None,
            valid_until=valid_until,
        )
    except InvalidInputError as refused:
        if not op.supersede or refused.field != "supersede":
            raise
        # a keyed memory (a caller-chosen id) is never superseded: update it in place
        logger.info("auto_memory: %s cannot be superseded; updated in place", op.memory_id)
        return _update(service, user, replace(op, supersede=False), source, actions, when)
    except MemoryNotFoundError:
        if Action.ADD not in actions:
            return OpOutcome(op, "missing", op.memory_id)
        logger.info("auto_memory: update of missing memory %s becomes an add", op.memory_id)
        decision = "add:update-target-missing"
        added = op.as_add("execute:update->add").with_decision(decision)
        return _add(service, user, added, source.with_decision(decision), when)
    except MemoryConflictError as conflict:
        if op.supersede:  # the new version exists already, or a newer one replaced the target
            logger.info(
                "auto_memory: supersede of %s duplicates memory %s; both kept as they are",
                op.memory_id,
                conflict.existing_id,
            )
            return OpOutcome(op, "duplicate", conflict.existing_id)
        logger.info(
            "auto_memory: update of %s duplicates memory %s; deleting the redundant source",
            op.memory_id,
            conflict.existing_id,
        )
        service.delete(user, op.memory_id, source=source)
        return OpOutcome(op, "duplicate", conflict.existing_id)
    return OpOutcome(op, "superseded" if op.supersede else "updated", entry.id)


def _write(
    service: MemoryService,
    user: UserKey,
    op: MemoryOp,
    source: Source,
    actions: Collection[Action],
    when: datetime | None,
) -> OpOutcome:
    if op.action == Action.ADD:
        return _add(service, user, op, source, when)
    return _update(service, user, op, source, actions, when)


def _execute_one(
    service: MemoryService,
    user: UserKey,
    op: MemoryOp,
    source: Source,
    actions: Collection[Action],
    when: datetime | None,
) -> OpOutcome:
    if op.action not in actions:
        return OpOutcome(op, "disabled", op.memory_id)
    if op.action == Action.UPDATE:
        op = _settle_model_update(service, user, op)
    source = source.with_decision(op.decision or op.action.value)
    if op.action in (Action.ADD, Action.UPDATE):
        try:
            return _write(service, user, op, source, actions, when)
        except InvalidInputError as exc:
            if exc.field != "valid_until" or op.valid_until is None:
                raise
            logger.warning(
                "auto_memory: valid_until of %r refused (%s); ignored", op.text[:80], exc
            )
            return _write(service, user, replace(op, valid_until=None), source, actions, when)
    if op.action == Action.DELETE:
        assert op.memory_id is not None
        found = service.delete(user, op.memory_id, source=source)
        return OpOutcome(op, "deleted" if found else "missing", op.memory_id)
    return OpOutcome(op, "cleared", None, count=service.clear(user, source=source))


def execute_ops(
    service: MemoryService,
    user: UserKey,
    ops: Sequence[MemoryOp],
    *,
    actions: Collection[Action],
    source: Source,
    keep_going: Callable[[], bool] = lambda: True,
    when: datetime | None = None,
) -> tuple[list[OpOutcome], bool]:
    """Run `ops` in order: the outcomes, and whether every op was reached (`keep_going()`,
    the job deadline, is asked before each; a no fails the job so the delta is retried).
    `when`: the time of the messages they came from (their `valid_from`), if known."""
    outcomes: list[OpOutcome] = []
    for op in ops:
        if not keep_going():
            return outcomes, False
        what = f"{op.action.value} {op.memory_id or ''}"
        try:
            outcomes.append(_execute_one(service, user, op, source, actions, when))
        except LangmemTrpcError as exc:
            logger.warning("auto_memory: operation failed (%s): %s", what, exc)
            retry = isinstance(exc, BackendError)
            outcomes.append(OpOutcome(op, "failed", op.memory_id, error=str(exc), retry=retry))
        except _INVALID as exc:  # this op's content is unusable: skip it, keep the rest
            name = type(exc).__name__
            logger.warning("auto_memory: operation skipped (%s): invalid: %s: %s", what, name, exc)
            outcomes.append(OpOutcome(op, "failed", op.memory_id, error=repr(exc)))
        except Exception as exc:  # unknown driver error: count it, retry the job later
            logger.warning("auto_memory: operation failed (%s)", op.action.value, exc_info=True)
            outcomes.append(OpOutcome(op, "failed", op.memory_id, error=repr(exc), retry=True))
    return outcomes, True
