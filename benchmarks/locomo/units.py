"""LoCoMo conversations as memory units, ingested through the service.

Turns become what `VerbatimExtractor` stores (one episode per turn: session
date, speaker, `context_topics` within the session); LoCoMo's `observation`
facts are the oracle-extraction units.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from langmem_trpc.extraction.extractor import context_topics
from langmem_trpc.service.protocol import MemoryService
from langmem_trpc.service.rules import embedding_text
from langmem_trpc.types import Kind, UserKey

from .loader import Conversation
from .structured import structured_records

__all__ = ["UnitKind", "UnitRecord", "conversation_units", "ingest_units", "unit_texts"]

UnitKind = Literal["turns", "turns-plain", "observations", "structured"]
"""`turns-plain`: what `VerbatimExtractor(context=False)` stores (no context topics);
`structured`: turns as extracted memories (`structured.py`: names in participants, places
in location)."""


@dataclass(frozen=True)
class UnitRecord:
    text: str
    kind: Kind
    event_time: datetime | None
    participants: tuple[str, ...]
    dia_ids: tuple[str, ...]
    topics: tuple[str, ...] = ()
    location: str | None = None


def conversation_units(conv: Conversation, units: UnitKind) -> list[UnitRecord]:
    if units == "structured":
        return [
            UnitRecord(text, Kind.EPISODE, t.date, people, (t.dia_id,), topics, place)
            for text, t, people, place, topics in structured_records(conv)
        ]
    if units in ("turns", "turns-plain"):
        turns = [t for t in conv.turns if t.display_text.strip()]
        records = []
        for i, t in enumerate(turns):
            prev = turns[i - 1] if i and turns[i - 1].session == t.session else None
            topics: list[str] = []
            if units == "turns":
                topics = context_topics(
                    t.speaker, prev.display_text if prev else None, prev.speaker if prev else None
                )
            records.append(
                UnitRecord(
                    t.display_text, Kind.EPISODE, t.date, (t.speaker,), (t.dia_id,), tuple(topics)
                )
            )
        return records
    return [
        UnitRecord(o.text, Kind.FACT, o.date, (o.speaker,), o.dia_ids)
        for o in conv.observations
        if o.text.strip()
    ]


def unit_texts(conv: Conversation, units: UnitKind) -> list[str]:
    """What the service's vector leg embeds for each unit (`embedding_text`), for prefetching."""
    return [embedding_text(u.text) for u in conversation_units(conv, units)]


def ingest_units(
    service: MemoryService, user: UserKey, records: list[UnitRecord]
) -> dict[str, tuple[str, ...]]:
    """Add every unit in order; returns memory id -> the dia ids it stands for
    (the idempotent add merges identical units, so one memory may stand for several)."""
    ids: dict[str, tuple[str, ...]] = {}
    for record in records:
        entry = service.add(
            user,
            record.text,
            kind=record.kind,
            event_time=record.event_time,
            participants=list(record.participants),
            topics=list(record.topics),
            location=record.location,
            metadata={"dia_ids": list(record.dia_ids)},
        )
        ids[entry.id] = tuple(dict.fromkeys([*ids.get(entry.id, ()), *record.dia_ids]))
    return ids
