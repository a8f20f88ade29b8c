"""Update policies: which proposed operations run, and in what shape.

- "merge_similar" (default): reconcile against the store (reconcile.py).
- "preserve_history": never lose a stated value: an update only when the new
  text keeps every material detail of the old one (spec 4.3), else an add.
- "append_only": only adds; exact duplicates dropped (spec 4.4).

Under every policy a fact whose state changed supersedes its old version when
both signals hold (extraction/supersede.py): reconcile's rewrite under
merge_similar; the model's update call under preserve_history (under
merge_similar it is settled at execution); and, under preserve_history and
append_only, a kept add that reconcile would match in its update or skip tier
(`supersede_adds`, one probe per add), where the "second row" used to stay current.

Verbatim records (raw turns) bypass every policy but identical-duplicate removal.
Decision labels (`MemoryOp.decision`, `Source.decision`) of the ops these two
rewrite: "update:preserve_history", "add:preserve_history" (an update that
would lose a detail), "add:append_only" (an update turned into an add),
"supersede:model change=..." and "supersede tier=... change=..." (supersede.py).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import time
from typing import Literal

from ..errors import ConfigurationError
from ..service.language import ENGLISH, Language
from ..service.text import normalize_text, primary_tokens, token_set
from ..types import Entry
from .ops import Action, MemoryOp
from .reconcile import Probe, Reconciled, Tier, best_match, decision_label, figures, merge_similar
from .signals import _CAPITALISED_RE, critical_values, negations
from .supersede import MODEL, explain_kept, settle

__all__ = [
    "POLICIES",
    "Policy",
    "apply_policy",
    "check_policy",
    "is_exact_duplicate",
    "supersede_adds",
]

logger = logging.getLogger(__name__)

Policy = Literal["merge_similar", "preserve_history", "append_only"]
POLICIES: tuple[Policy, ...] = ("merge_similar", "preserve_history", "append_only")

OLD_COVERAGE = 0.95
NEW_COVERAGE = 0.70
_CHANGE_MARKER = re.compile(
    r"(?i)\b(?:now|currently|no longer|instead|changed?|used to)\b|现在|目前|不再|改为|变成|而是|曾经"
)


def check_policy(policy: str) -> Policy:
    if policy not in POLICIES:
        raise ConfigurationError(f"policy must be one of {', '.join(POLICIES)}; got {policy!r}")
    return policy  # type: ignore[return-value]


def _people(values: Sequence[str]) -> frozenset[str]:
    return frozenset(p.strip().casefold() for p in values if p.strip())


def _same_identity(op: MemoryOp, other: MemoryOp | Entry) -> bool:
    if isinstance(other, Entry):
        text, kind, when = other.text, other.kind, other.memory.event_time
        people, place = other.memory.participants, other.memory.location
    else:
        text, kind, when = other.text, other.effective_kind, other.event_time
        people, place = list(other.participants), other.location
    return (
        normalize_text(op.text) == normalize_text(text)
        and op.effective_kind == kind
        and op.event_time == when
        and _people(op.participants) == _people(people)
        and (op.location or "").strip().casefold() == (place or "").strip().casefold()
    )


def is_exact_duplicate(op: MemoryOp, others: Sequence[MemoryOp | Entry]) -> bool:
    """Same normalised text, kind, event time, participants and location (spec 4.3 rule 1)."""
    return any(_same_identity(op, other) for other in others)


@dataclass(frozen=True)
class _Candidate:
    entry: Entry
    duplicate: bool
    old_coverage: float
    new_coverage: float


def _metadata_compatible(op: MemoryOp, entry: Entry) -> bool:
    stored = entry.memory
    if op.effective_kind != stored.kind:
        return False
    old, new = stored.event_time, op.event_time
    if old and new and old != new:  # compatible only when a bare date gains its time of day
        if not (old.date() == new.date() and old.time() == time(0) and new.time() != time(0)):
            return False
    people = _people(stored.participants)
    if op.participants and people and not people <= _people(op.participants):
        return False
    return not (
        op.location and stored.location and op.location.casefold() != stored.location.casefold()
    )


def _material(text: str, language: Language) -> frozenset[str]:
    return frozenset(primary_tokens(text, language)) | {
        w.lower() for w in _CAPITALISED_RE.findall(text)
    }


def _is_subsequence(needles: Sequence[str], haystack: Sequence[str]) -> bool:
    it = iter(haystack)
    return all(any(n == h for h in it) for n in needles)


def _classify(op: MemoryOp, entry: Entry, language: Language) -> _Candidate | None:
    """How `op` relates to a stored memory; None when it must stay a separate memory."""
    if _same_identity(op, entry):
        return _Candidate(entry, True, 1.0, 1.0)
    if not _metadata_compatible(op, entry):
        return None
    old_set, new_set = token_set(entry.text, language), token_set(op.text, language)
    if not old_set or not new_set:
        return None
    shared = len(old_set & new_set)
    old_cov, new_cov = shared / len(old_set), shared / len(new_set)
    if old_cov < OLD_COVERAGE or new_cov < NEW_COVERAGE:
        return None
    if not _material(entry.text, language) <= (new_set | _material(op.text, language)):
        return None
    if not critical_values(entry.text.lower()) <= critical_values(op.text.lower()):
        return None
    if negations(entry.text) != negations(op.text):
        return None
    if _CHANGE_MARKER.search(op.text) and not _CHANGE_MARKER.search(entry.text):
        return None
    if not _is_subsequence(primary_tokens(entry.text, language), primary_tokens(op.text, language)):
        return None
    return _Candidate(entry, False, old_cov, new_cov)


def _preserve(
    op: MemoryOp,
    entries: Sequence[Entry],
    actions: Collection[Action],
    language: Language,
    otherwise: MemoryOp,
) -> MemoryOp | None:
    """`op` as an update of the best of `entries` it may update, None when one duplicates it,
    else `otherwise`."""
    candidates = [c for c in (_classify(op, e, language) for e in entries) if c is not None]
    if not candidates:
        return otherwise
    best = max(
        candidates,
        key=lambda c: (c.duplicate, c.old_coverage, c.new_coverage, c.entry.score or 0.0),
    )
    if best.duplicate:
        return None
    if Action.UPDATE not in actions:
        return otherwise
    entry = best.entry
    topics = [*entry.memory.topics, *op.topics]
    rewritten = op.as_update(entry.id, topics, op.kind or entry.kind, "policy:update")
    return rewritten.with_decision("update:preserve_history")


def preserve_history(
    ops: Sequence[MemoryOp],
    existing: Sequence[Entry],
    actions: Collection[Action],
    language: Language = ENGLISH,
) -> Reconciled:
    """Spec 4.3: compare with the retrieved memories only (over `language`'s tokens);
    never overwrite a stated value."""
    by_id = {e.id: e for e in existing}
    kept: list[MemoryOp] = []
    dropped: list[MemoryOp] = []
    for op in ops:
        decided: MemoryOp | None = op
        if op.action == Action.ADD:
            if is_exact_duplicate(op, [*existing, *kept]):
                decided = None
            elif Action.ADD in actions:
                decided = _preserve(op, existing, actions, language, op)
        elif op.action == Action.UPDATE:
            target = by_id.get(op.memory_id or "")
            settled = settle(op, target, MODEL, language) if target else op
            if settled.supersede:
                kept.append(settled)
                continue
            added = op.as_add("policy:update->add").with_decision("add:preserve_history")
            decided = _preserve(op, [target] if target else [], actions, language, added)
        (dropped if decided is None else kept).append(decided or op)
    return Reconciled(kept, dropped)


def append_only(ops: Sequence[MemoryOp], existing: Sequence[Entry]) -> Reconciled:
    """Spec 4.4: adds only (updates become adds), exact duplicates dropped, deletes ignored."""
    kept: list[MemoryOp] = []
    dropped: list[MemoryOp] = []
    for op in ops:
        if op.action == Action.UPDATE:
            op = op.as_add("policy:append_only").with_decision("add:append_only")
        if op.action != Action.ADD:
            logger.debug("append_only: dropping %s", op.action.value)
            continue
        (dropped if is_exact_duplicate(op, [*existing, *kept]) else kept).append(op)
    return Reconciled(kept, dropped)


def supersede_adds(
    ops: Sequence[MemoryOp],
    probe: Probe,
    actions: Collection[Action],
    language: Language = ENGLISH,
) -> list[MemoryOp]:
    """Each kept add that reconcile would match in its update or skip tier and that
    changes the state of that fact becomes its supersede (preserve_history,
    append_only); other ops stay as they are. A failed probe keeps the add."""
    if Action.UPDATE not in actions:
        return list(ops)
    claimed = {op.memory_id for op in ops if op.memory_id}
    out: list[MemoryOp] = []
    for op in ops:
        if op.action != Action.ADD or op.verbatim or not op.text.strip():
            out.append(op)
            continue
        try:
            best = best_match(op, probe(op.text.strip()), language)
        except Exception:  # a failed probe keeps the add, as reconcile does
            logger.warning("supersede: probe failed; keeping the add", exc_info=True)
            out.append(op)
            continue
        if best is None or best.tier == Tier.NONE or best.entry.id in claimed:
            if best is not None:
                why = "not the same memory" if best.tier == Tier.NONE else "the memory is taken"
                explain_kept(op, best.entry, f"{why} ({figures(best)})", language)
            out.append(op)
            continue
        entry = best.entry
        update = op.as_update(entry.id, [*entry.memory.topics, *op.topics], entry.kind, "supersede")
        settled = settle(update, entry, decision_label("supersede", best), language)
        if settled.supersede:
            claimed.add(entry.id)
        else:
            explain_kept(op, entry, f"no change of state of a fact ({figures(best)})", language)
        out.append(settled if settled.supersede else op)
    return out


def apply_policy(
    policy: Policy,
    ops: Sequence[MemoryOp],
    *,
    probe: Probe,
    existing: Sequence[Entry],
    actions: Collection[Action],
    language: Language = ENGLISH,
) -> Reconciled:
    """Run `policy` over a batch; verbatim ops keep their place and are only de-duplicated.
    `language`: the store's (`MemoryService.language`), for the policies' token comparisons."""
    model = [op for op in ops if not op.verbatim]
    unique: list[MemoryOp] = []
    repeats: list[MemoryOp] = []
    for op in ops:
        if op.verbatim:
            (repeats if op in unique else unique).append(op)
    if policy == "merge_similar":
        decided = merge_similar(model, probe, actions, language)
    elif policy == "preserve_history":
        decided = preserve_history(model, existing, actions, language)
    else:
        decided = append_only(model, existing)
    if policy != "merge_similar":
        decided = Reconciled(
            supersede_adds(decided.ops, probe, actions, language), decided.duplicates
        )
    # Verbatim batches carry no model ops in practice; keep their order and append any model ops.
    return Reconciled([*unique, *decided.ops], [*repeats, *decided.duplicates])
