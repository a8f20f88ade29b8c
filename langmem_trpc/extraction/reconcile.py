"""Reconcile (policy "merge_similar"): turn near-duplicate adds into skips or updates.

Pure decisions over probe results (one search per add, `PROBE_OPTIONS`, run
by the caller so every decision sees the store as it was before the batch).
Tiers per candidate (spec 4.2), Jaccard over the store `Language`'s tokens:
skip if score >= 0.90 or Jaccard >= 0.70, update if score >= 0.60 or Jaccard
>= 0.40, else none; the best candidate wins by tier, score, Jaccard, probe order.

Stricter than the reference: a skip also needs numbers, dates, negations and
names to agree ("Go 1.23" vs "Go 1.24" is an update); an episode never merges
into one of another time, participants, place or dated wording; an explicit
`kind` must match; a stored memory takes at most one update per batch.

Decision labels (`MemoryOp.decision`, recorded as `Source.decision`), with the
best candidate's figures when a probe found one (`decision_label`): "add" (no
candidate, or "add tier=none score=0.41 jaccard=0.20"); "add:kept tier=..."
(a tier fired but update is off or the memory is taken); "add:probe-failed";
"update tier=update ..." (rewritten into an update); "update:topics
tier=skip ..." (a duplicate bringing new topics); "supersede tier=update ...
change=number" (a rewrite that changes the state of a fact: the old version is
closed, extraction/supersede.py). A plain duplicate is dropped. A kept add
logs at INFO why it supersedes nothing when the probe found a candidate.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from enum import IntEnum

from ..service.language import ENGLISH, Language
from ..service.text import token_jaccard
from ..types import Entry, Kind, SearchOptions
from .ops import Action, MemoryOp
from .signals import date_words, numbers, state_change, values_agree
from .supersede import explain_kept, other_subject, settle

__all__ = [
    "JACCARD_HIGH",
    "JACCARD_MID",
    "MIN_PROBE_SCORE",
    "PROBE_OPTIONS",
    "SKIP_SCORE",
    "TOP_K",
    "UPDATE_SCORE",
    "Match",
    "Reconciled",
    "Tier",
    "classify",
    "decide_add",
    "decision_label",
    "figures",
    "merge_similar",
]

logger = logging.getLogger(__name__)

TOP_K = 3
SKIP_SCORE = 0.90
UPDATE_SCORE = 0.60
JACCARD_HIGH = 0.70
JACCARD_MID = 0.40
MIN_PROBE_SCORE = 0.30
PROBE_OPTIONS = SearchOptions(max_results=TOP_K, similarity_threshold=MIN_PROBE_SCORE)

Probe = Callable[[str], list[Entry]]


class Tier(IntEnum):
    NONE = 0
    UPDATE = 1
    SKIP = 2


@dataclass(frozen=True)
class Match:
    entry: Entry
    score: float
    jaccard: float
    tier: Tier


def _same_event(op: MemoryOp, entry: Entry, language: Language) -> bool:
    """Episodes merge only when they can be the same event."""
    stored = entry.memory
    if op.event_time and stored.event_time and op.event_time.date() != stored.event_time.date():
        return False
    if op.participants and stored.participants:
        left = {p.casefold() for p in op.participants}
        right = {p.casefold() for p in stored.participants}
        if not (left <= right or right <= left):
            return False
    if op.location and stored.location and op.location.casefold() != stored.location.casefold():
        return False
    same_numbers = numbers(op.text, language) == numbers(stored.text, language)
    return same_numbers and date_words(op.text) == date_words(stored.text)


def classify(op: MemoryOp, entry: Entry, language: Language = ENGLISH) -> Match | None:
    """Score one candidate for an add; None when it must never absorb the add."""
    if op.kind is not None and op.kind != entry.kind:
        return None
    if entry.kind == Kind.EPISODE and not _same_event(op, entry, language):
        return None
    score = entry.score or 0.0
    jaccard = token_jaccard(op.text, entry.text, language)
    if score >= SKIP_SCORE or jaccard >= JACCARD_HIGH:
        tier = Tier.SKIP if values_agree(op.text, entry.text, language) else Tier.UPDATE
    elif score >= UPDATE_SCORE or jaccard >= JACCARD_MID:
        tier = Tier.UPDATE
    else:
        tier = Tier.NONE
    return Match(entry, score, jaccard, tier)


def best_match(
    op: MemoryOp, entries: Sequence[Entry], language: Language = ENGLISH
) -> Match | None:
    candidates = (classify(op, e, language) for e in entries[:TOP_K] if e.id)
    matches = [m for m in candidates if m is not None]
    return max(reversed(matches), key=lambda m: (m.tier, m.score, m.jaccard), default=None)


def figures(match: Match) -> str:
    """The tier, score and Jaccard of `match`, as decision labels and logs write them."""
    tier = match.tier.name.lower()
    return f"tier={tier} score={match.score:.2f} jaccard={match.jaccard:.2f}"


def decision_label(decision: str, match: Match | None) -> str:
    """`decision`, then the tier, score and Jaccard of `match` when there is one."""
    return decision if match is None else f"{decision} {figures(match)}"


def decide_add(
    op: MemoryOp,
    entries: Sequence[Entry],
    *,
    update_enabled: bool,
    claimed: Collection[str] = (),
    language: Language = ENGLISH,
) -> MemoryOp | None:
    """Keep, rewrite to an update, or drop (None) one proposed add; the kept op carries its decision."""
    best = best_match(op, entries, language)
    if best is None or best.tier == Tier.NONE:
        if best is not None:
            explain_kept(op, best.entry, f"not the same memory ({figures(best)})", language)
        return op.with_decision(decision_label("add", best))
    entry = best.entry
    origin, decision = "reconcile:update", "update"
    if best.tier == Tier.SKIP:
        stored = {t.casefold() for t in entry.memory.topics}
        if all(t.casefold() in stored for t in op.topics):  # no new topics
            logger.debug("reconcile: %r duplicates memory %s; skipped", op.text, entry.id)
            return None
        origin, decision = "reconcile:skip+topics", "update:topics"
    if not update_enabled or entry.id in claimed:
        explain_kept(op, entry, "update is off or the memory is taken", language)
        return op.with_decision(decision_label("add:kept", best))
    lacks = other_subject(entry.text, op.text, language)
    if lacks is not None and state_change(entry.text, op.text, language) is not None:
        # a changed value of a similar fact about another subject: neither signal 1 nor an update
        explain_kept(op, entry, f"another subject (it lacks: {lacks})", language)
        return op.with_decision(decision_label("add:kept", best))
    rewritten = op.as_update(
        entry.id, [*entry.memory.topics, *op.topics], op.kind or entry.kind, origin
    )
    rewritten = rewritten.with_decision(decision_label(decision, best))
    return settle(rewritten, entry, decision_label("supersede", best), language)


def _duplicate_in_batch(op: MemoryOp, accepted: Sequence[MemoryOp], language: Language) -> bool:
    return any(
        (prior.kind is None or op.kind is None or prior.kind == op.kind)
        and token_jaccard(op.text, prior.text, language) >= JACCARD_HIGH
        and values_agree(op.text, prior.text, language)
        for prior in accepted
        if prior.action in (Action.ADD, Action.UPDATE) and not prior.verbatim
    )


@dataclass(frozen=True)
class Reconciled:
    """A batch after its update policy: what to execute, and what was dropped as a duplicate."""

    ops: list[MemoryOp]
    duplicates: list[MemoryOp]


def merge_similar(
    ops: Sequence[MemoryOp],
    probe: Probe,
    actions: Collection[Action],
    language: Language = ENGLISH,
) -> Reconciled:
    """Apply merge_similar to a batch; `probe(text)` searches the store, `language` is its
    (`MemoryService.language`). A failed probe keeps the add (never worse than no reconcile)."""
    claimed = {
        op.memory_id for op in ops if op.action in (Action.UPDATE, Action.DELETE) and op.memory_id
    }
    result: list[MemoryOp] = []
    dropped: list[MemoryOp] = []
    adding = Action.ADD in actions
    for op in ops:
        if op.action != Action.ADD or op.verbatim or not adding or not op.text.strip():
            result.append(op)
            continue
        if _duplicate_in_batch(op, result, language):
            logger.debug("reconcile: %r repeats an earlier op of the batch; skipped", op.text)
            dropped.append(op)
            continue
        try:
            entries = probe(op.text.strip())
        except Exception:  # a failed probe keeps the add (spec 4.5)
            logger.warning("reconcile: probe failed; keeping the add", exc_info=True)
            result.append(op.with_decision("add:probe-failed"))
            continue
        decided = decide_add(
            op, entries, update_enabled=Action.UPDATE in actions, claimed=claimed, language=language
        )
        if decided is None:
            dropped.append(op)
            continue
        if decided.action == Action.UPDATE and decided.memory_id:
            claimed.add(decided.memory_id)
        result.append(decided)
    return Reconciled(result, dropped)
