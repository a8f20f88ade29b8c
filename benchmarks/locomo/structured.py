"""Structured units: LoCoMo turns as the extractor writes memories, derived without a model.

Each turn (its text plus the shared image's caption) becomes one episode whose
information sits in the fields the extraction prompt asks for:

* `participants`: the speaker, then every speaker name of the conversation the text
  mentions (whole word, case-sensitive), e.g. ("Melanie", "Caroline");
* `location`: the first place of the conversation's gazetteer the text mentions;
* `event_time`: the session date;
* `text`: the turn with those names and that place removed (the words between them
  stay); `topics`: `context_topics` of the previous turn in the session, without speaker
  names (they are participants).

The gazetteer comes from the conversation itself: runs of capitalised words that
follow "in", "at", "to", "from" or "near" somewhere in it, minus speaker names, months,
weekdays and "I". It is deliberately simple: it finds "Paris" in "went to Paris" and
misses places never named after a preposition; people other than the two speakers
(friends, pets) stay in the text, as no list of them exists without a model.
"""

from __future__ import annotations

import re

from langmem_trpc.extraction.extractor import context_topics

from .loader import Conversation, Turn

_AFTER_PREPOSITION = re.compile(
    r"\b(?:in|at|to|from|near)\s+((?:[A-Z][a-z]+)(?:\s+[A-Z][a-z]+){0,2})"
)
_NOT_PLACES = frozenset(
    "I January February March April May June July August September October November December"
    " Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
)


def place_gazetteer(conv: Conversation) -> list[str]:
    """Capitalised phrases after a preposition anywhere in the conversation, longest first."""
    speakers = set(conv.speakers)
    places: set[str] = set()
    for turn in conv.turns:
        for match in _AFTER_PREPOSITION.finditer(turn.display_text):
            words = match.group(1).split()
            while words and (words[-1] in _NOT_PLACES or words[-1] in speakers):
                words.pop()
            if words and words[0] not in _NOT_PLACES and words[0] not in speakers:
                places.add(" ".join(words))
    return sorted(places, key=lambda p: (-len(p), p))


def _whole(phrase: str) -> re.Pattern[str]:
    return re.compile(r"\b" + re.escape(phrase) + r"\b")


def _strip(text: str, phrases: list[str]) -> str:
    for phrase in phrases:
        text = _whole(phrase).sub("", text)
    return re.sub(r"\s+([,.!?;:])", r"\1", re.sub(r"\s{2,}", " ", text)).strip()


def structured_fields(
    turn: Turn, speakers: tuple[str, ...], places: list[str]
) -> tuple[str, tuple[str, ...], str | None]:
    """(text without names and place, participants, location) of one turn."""
    text = turn.display_text
    mentioned = [s for s in speakers if s != turn.speaker and _whole(s).search(text)]
    location = next((p for p in places if _whole(p).search(text)), None)
    removed = [*speakers, *([location] if location else [])]
    stripped = _strip(text, removed) or text  # a turn that was only a name keeps it
    return stripped, (turn.speaker, *mentioned), location


Structured = tuple[str, Turn, tuple[str, ...], str | None, tuple[str, ...]]
"""(text, turn, participants, location, topics) of one turn."""


def structured_records(conv: Conversation) -> list[Structured]:
    """The `Structured` fields of each non-empty turn, in order."""
    places = place_gazetteer(conv)
    speakers = conv.speakers
    turns = [t for t in conv.turns if t.display_text.strip()]
    out: list[Structured] = []
    previous: tuple[str, str] | None = None  # stripped text and speaker, within the session
    for i, turn in enumerate(turns):
        if i and turns[i - 1].session != turn.session:
            previous = None
        text, participants, location = structured_fields(turn, speakers, places)
        topics = context_topics(None, previous[0] if previous else None, None)
        topics = [t for t in topics if t not in speakers]
        out.append((text, turn, participants, location, tuple(topics)))
        previous = (text, turn.speaker)
    return out
