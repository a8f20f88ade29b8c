"""Reconcile for `MemoryStore(reconcile=True)`: the worker's "merge_similar" policy on a put.

A put under a new key is a proposed add, probed as the worker probes
(`PROBE_OPTIONS`) within the same namespace: it stays an add, is dropped as a
duplicate (nothing written), or becomes an update of the closest memory, which
keeps its key and namespace: in place (same id) when it only enriches or rewords
it, as a supersede (a new version under a new id, the old one closed, both
stored) when it changes the state of a fact: the same two signals as the
worker's (extraction/supersede.py). The history source records the decision label.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...extraction.ops import Action, MemoryOp
from ...extraction.policies import apply_policy
from ...extraction.reconcile import PROBE_OPTIONS, best_match, decision_label
from ...service.protocol import MemoryService
from ...types import Entry, Kind, UserKey
from ._values import indexed, namespace_of

_ACTIONS = frozenset({Action.ADD, Action.UPDATE})


@dataclass(frozen=True)
class Absorbed:
    """The put's fate: `target` None stores it as a new item; else it merged into
    `target` (`updated` False when it was a duplicate; `supersede` True when the
    put is a new version of it). `decision` is the label."""

    target: Entry | None
    updated: bool
    topics: list[str]
    decision: str
    supersede: bool = False


def reconcile_put(
    service: MemoryService,
    user: UserKey,
    scope: Sequence[str],
    text: str,
    fields: Mapping[str, Any],
) -> Absorbed:
    """What the merge_similar policy decided for the put (see `Absorbed`)."""
    namespace = (user.app_name, user.user_id, *scope)
    kind = fields.get("kind")
    proposed = MemoryOp.add(
        text,
        topics=fields.get("topics", ()),
        kind=Kind(kind) if kind is not None else None,
        event_time=fields.get("event_time"),
        participants=fields.get("participants", ()),
        location=fields.get("location"),
    )
    candidates: dict[str, Entry] = {}

    def probe(query: str) -> list[Entry]:
        hits = service.search(user, query, PROBE_OPTIONS)
        hits = [e for e in hits if namespace_of(e) == namespace and indexed(e)]
        candidates.update((e.id, e) for e in hits)
        return hits

    decided = apply_policy(
        "merge_similar",
        [proposed],
        probe=probe,
        existing=(),
        actions=_ACTIONS,
        language=service.language,
    )
    op = decided.ops[0] if decided.ops else None
    if op is not None and op.action == Action.ADD:
        return Absorbed(None, False, [], op.decision or "add")
    if op is None:  # a duplicate: the best candidate already says it
        best = best_match(proposed, list(candidates.values()), service.language)
        if best is not None:
            label = decision_label("duplicate", best)
            return Absorbed(best.entry, False, list(best.entry.memory.topics), label)
    elif (target := candidates.get(op.memory_id or "")) is not None:
        return Absorbed(target, True, list(op.topics), op.decision or "update", op.supersede)
    # unreachable: a skip always has a candidate, an update names a probed memory
    return Absorbed(None, False, [], "add")  # pragma: no cover
