"""What a hybrid search adds to its first tier (`reads.search`), before it ranks.

`masked_query` (`FusionSettings.mask_names`): the question embedded without the
participants it names. `period_options` and `merge_legs` (`period_fetch`): the
candidates within the dated periods the question names, fetched and merged in. Pure
functions of the query and the fetched legs, as `search.py`'s ranking is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from itertools import chain

from ..types import Entry, SearchOptions
from .language import ENGLISH, Language
from .periods import period_span, query_periods
from .search import Legs, named_participants
from .text import primary_tokens

__all__ = ["masked_query", "merge_legs", "period_options"]


def masked_query(query: str, legs: Iterable[Legs], language: Language = ENGLISH) -> str:
    """The text the vector leg embeds once a search's first tier is fetched: each
    participant of a candidate that the query names, with its possessive ending,
    replaced by the language's `person_word` ("What did Caroline paint?" -> "What did
    they paint?"). The keyword leg (its participants field) and the "participants" step
    already match the name; in the query's vector it pulls the memories that address
    the person by name ("Hey Caroline!") above what is asked, as dense retrievers
    match names poorly (Sciavolino et al., EMNLP 2021). A name is masked where the
    query spells it as the participant is spelled (any case); the query as given when
    it names no candidate's participant or nothing else. A possessive becomes the same
    word ("What is they job?"): "their" lowered LoCoMo's dev figures
    (docs/bench-locomo.md, round 12)."""
    entries = (
        entry for leg in legs for part in (leg.vector or (), leg.keyword) for entry, _ in part
    )
    named = named_participants(query, entries, language)
    text = bare = query
    for person in sorted(named, key=lambda name: (-len(name), name)):
        name = r"\s+".join(re.escape(word) for word in person.split())
        ending = f"(?:{language.possessive})?" if language.possessive else ""
        pattern = re.compile(rf"(?<!\w){name}{ending}(?!\w)", re.I)
        text, bare = pattern.sub(language.person_word, text), pattern.sub(" ", bare)
    if text == query or not primary_tokens(bare, language):
        return query  # nothing named, or nothing but names asked
    return " ".join(text.split())


def period_options(options: SearchOptions, language: Language = ENGLISH) -> SearchOptions | None:
    """`options` limited to the calendar periods the query names with a year ("in May
    2023", "on 3 June, 2023": from the first to the last instant any of them covers,
    within the search's own time range), for the fetch `FusionSettings.period_fetch`
    adds; None when the query names none or the ranges do not meet. The "time" step
    prefers what is in the period among the candidates fetched; this fetch makes sure
    the period's memories are among them, whatever the rest of the question matches."""
    spans = [s for p in query_periods(options.query, language) if (s := period_span(p))]
    if not spans:
        return None
    after = min(s for s, _ in spans)
    before = max(e for _, e in spans)
    if options.time_after is not None:
        after = max(after, options.time_after)
    if options.time_before is not None:
        before = min(before, options.time_before)
    if after > before:
        return None
    return options.model_copy(update={"time_after": after, "time_before": before})


def merge_legs(first: Legs, other: Legs) -> Legs:
    """Two fetches' candidates of one kind as one `Legs`: each leg the union by entry
    id (the higher score of a candidate both hold), best first."""

    def union(
        a: list[tuple[Entry, float]] | None, b: list[tuple[Entry, float]] | None
    ) -> list[tuple[Entry, float]] | None:
        if a is None or b is None:
            return a if b is None else b
        best: dict[str, tuple[Entry, float]] = {}
        for entry, score in chain(a, b):
            if entry.id not in best or score > best[entry.id][1]:
                best[entry.id] = (entry, score)
        return sorted(best.values(), key=lambda hit: -hit[1])

    return Legs(union(first.vector, other.vector), union(first.keyword, other.keyword) or [])
