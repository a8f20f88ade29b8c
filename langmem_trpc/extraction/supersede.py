"""Supersede: when the worker closes an old version instead of overwriting it.

A supersede needs two signals at once (docs/how-it-works.md, "Supersede: signals
and guards"):

1. the new statement is about the same memory: the model named it in an update
   call, or reconcile matched it in its update or skip tier;
2. the state changed (`signals.state_change`): a value of the old text is gone,
   a negation flipped, or a change marker appeared.

Both, and old and new are facts: `update(..., supersede=True)` (a new version, the
old one closed). Only (1): an update in place (an enrichment or a paraphrase).
Only (2), or neither: an add, both stay current, and the log says why at INFO.
An episode is never superseded: something that happened stays true.

Decision labels (`MemoryOp.decision`, recorded as `Source.decision`):
"supersede tier=update score=0.67 jaccard=0.60 change=number" (a reconcile
match), "supersede:model change=marker:upgraded" (the model's update call).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, replace

from ..service.language import ENGLISH, Language
from ..types import Entry, Kind
from .ops import MemoryOp
from .signals import change_marker, date_words, names, number_words, state_change

__all__ = ["MODEL", "Verdict", "explain_kept", "judge", "other_subject", "settle"]

logger = logging.getLogger(__name__)

MODEL = "supersede:model"
"""The label prefix of a supersede whose first signal is the model's update call."""


@dataclass(frozen=True)
class Verdict:
    """Whether a write that names `old` supersedes it; `change` is signal 2's reason."""

    supersede: bool
    change: str | None
    why: str
    """Why not (for the log); "" when it supersedes."""


_WORD_RE = re.compile(r"[^\W\d_]+")


def other_subject(old: str, new: str, language: Language = ENGLISH) -> str | None:
    """The words (stemmed; stopwords, names, dates and numbers aside) of `old` that `new` lacks,
    when it has no change marker: a similar fact about another subject ("the staging
    cluster" after "the production cluster"); None when `new` may be about `old`."""
    if change_marker(new, language) is not None:
        return None

    def words(text: str) -> set[str]:
        skip = names(text) | date_words(text) | language.stopwords | number_words(language)
        found = [w for w in _WORD_RE.findall(text.lower()) if w not in skip]
        return set(language.stem_words(found))

    missing = words(old) - words(new)
    return ", ".join(sorted(missing)) or None


def judge(
    old: Entry, text: str, kind: Kind | None, language: Language = ENGLISH, *, matched: bool = False
) -> Verdict:
    """Signal 2 and the fact rule for a write already known to name `old` (signal 1);
    `matched`: signal 1 is reconcile's match, not the model's choice, so a fact about
    another subject (`other_subject`) is not a new version of it."""
    change = state_change(old.text, text, language)
    if change is None:
        return Verdict(False, None, "no change of state (an enrichment or a paraphrase)")
    if matched and (lacks := other_subject(old.text, text, language)) is not None:
        return Verdict(False, change, f"another subject (it lacks: {lacks})")
    if old.kind != Kind.FACT or (kind or old.kind) != Kind.FACT:
        return Verdict(False, change, "an episode is never superseded")
    if old.superseded_by is not None:
        return Verdict(False, change, f"it is already superseded by {old.superseded_by}")
    return Verdict(True, change, "")


def settle(update: MemoryOp, old: Entry, prefix: str, language: Language = ENGLISH) -> MemoryOp:
    """`update` (an update of `old`, signal 1 held) as a supersede labelled `prefix change=..`
    when `judge` says so, else unchanged: an update in place."""
    matched = not prefix.startswith(MODEL)
    verdict = judge(old, update.text, update.kind, language, matched=matched)
    if verdict.supersede:
        return replace(update, supersede=True, decision=f"{prefix} change={verdict.change}")
    if verdict.change is not None:
        logger.info("supersede: %s is not superseded: %s", old.id, verdict.why)
    return update


def explain_kept(op: MemoryOp, candidate: Entry, why: str, language: Language = ENGLISH) -> None:
    """Log at INFO why a kept add does not supersede `candidate`, the closest memory found."""
    change = state_change(candidate.text, op.text, language)
    logger.info(
        "supersede: %r kept beside memory %s, both current (no supersede: %s; change=%s)",
        op.text[:80],
        candidate.id,
        why,
        change or "none",
    )
