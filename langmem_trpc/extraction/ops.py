"""`MemoryOp`: one operation an extractor proposes (extractors never touch storage);
the update policy rewrites or drops some, and the worker executes the rest in order.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import Enum

from ..types import Kind, canonical_participants, canonical_topics

__all__ = ["Action", "MemoryOp"]


class Action(str, Enum):
    """What an operation does; the values are the short names used in settings."""

    ADD = "add"
    UPDATE = "update"
    DELETE = "delete"
    CLEAR = "clear"


@dataclass(frozen=True, slots=True)
class MemoryOp:
    """A proposed change to one user's memories.

    `kind=None` means "not said": an add stores a fact, an update keeps the stored
    kind (so do empty `participants` and `location=None`). `verbatim` marks raw turns
    (VerbatimExtractor): de-duplicated only when identical, never merged by reconcile.
    """

    action: Action
    text: str = ""
    memory_id: str | None = None
    topics: tuple[str, ...] = ()
    kind: Kind | None = None
    event_time: datetime | None = None
    participants: tuple[str, ...] = ()
    location: str | None = None
    verbatim: bool = False
    valid_until: datetime | None = None
    """When what the memory says stops being true ("until Friday"), as the model said it."""
    supersede: bool = False
    """An update that closes the old version and writes a new one (extraction/supersede.py)."""
    origin: str | None = field(default=None, compare=False)
    """Why the op has its final shape ("model", "reconcile:update", ...), for reports and logs."""
    decision: str | None = field(default=None, compare=False)
    """The update policy's decision label, recorded as `Source.decision` on the write
    (see `extraction/reconcile.py`); None: the op runs as proposed."""

    @classmethod
    def add(
        cls,
        text: str,
        *,
        topics: Iterable[str] = (),
        kind: Kind | None = None,
        event_time: datetime | None = None,
        participants: Iterable[str] = (),
        location: str | None = None,
        verbatim: bool = False,
        valid_until: datetime | None = None,
    ) -> MemoryOp:
        return cls(
            Action.ADD,
            text=text,
            topics=tuple(canonical_topics(list(topics))),
            kind=kind,
            event_time=event_time,
            participants=tuple(canonical_participants(list(participants))),
            location=(location or "").strip() or None,
            verbatim=verbatim,
            valid_until=valid_until,
        )

    @classmethod
    def update(
        cls,
        memory_id: str,
        text: str,
        *,
        topics: Iterable[str] = (),
        kind: Kind | None = None,
        event_time: datetime | None = None,
        participants: Iterable[str] = (),
        location: str | None = None,
        valid_until: datetime | None = None,
    ) -> MemoryOp:
        content = cls.add(
            text,
            topics=topics,
            kind=kind,
            event_time=event_time,
            participants=participants,
            location=location,
            valid_until=valid_until,
        )
        return replace(content, action=Action.UPDATE, memory_id=memory_id)

    @classmethod
    def delete(cls, memory_id: str) -> MemoryOp:
        return cls(Action.DELETE, memory_id=memory_id)

    @classmethod
    def clear(cls) -> MemoryOp:
        return cls(Action.CLEAR)

    @property
    def effective_kind(self) -> Kind:
        return self.kind or Kind.FACT

    def as_update(self, memory_id: str, topics: Iterable[str], kind: Kind, origin: str) -> MemoryOp:
        """This op's content as an update of `memory_id` (reconcile's rewrite)."""
        return replace(
            self,
            action=Action.UPDATE,
            memory_id=memory_id,
            topics=tuple(canonical_topics(list(topics))),
            kind=kind,
            origin=origin,
        )

    def as_add(self, origin: str) -> MemoryOp:
        return replace(self, action=Action.ADD, memory_id=None, supersede=False, origin=origin)

    def with_decision(self, decision: str) -> MemoryOp:
        """This op, carrying the policy's decision label to execution."""
        return replace(self, decision=decision)
