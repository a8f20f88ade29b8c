"""Search semantics written once: RRF and its named signals, kind fallback, dedupe
(the keyword scorer is `bm25.py`; its types are re-exported here).

A search is planned, then ranked. `plan_search` decides what to fetch (the
kinds, each a vector leg and a keyword leg of `pool` candidates) as a plain
`SearchPlan`; a backend fetches those scored candidates (PostgreSQL in one
statement); `rank_search`, a pure function of the plan, the fetched legs
and the options, turns them into the final ranked list, so every backend
answers the same query the same way.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from itertools import chain
from typing import NamedTuple

import numpy as np

from ..types import Entry, FusionSettings, Kind, SearchOptions
from .bm25 import CorpusStats, KeywordDoc, QueryTerms, keyword_score
from .documents import fts_document, keys_of, keyword_doc, topics_document
from .language import ENGLISH, Language
from .periods import implied_spans, overlaps, query_periods, says_time
from .text import jaccard, primary_tokens, token_set

__all__ = [
    "DEDUPE_JACCARD",
    "DEFAULT_MIN_SCORE",
    "FEEDBACK_DOCS",
    "FEEDBACK_TERMS",
    "MAX_POOL",
    "MIN_KIND_FALLBACK_RESULTS",
    "NEIGHBOUR_CAP",
    "POOL_GROWTH",
    "RANK_TIE_DIGITS",
    "SESSION_BEST",
    "Best",
    "Legs",
    "SearchPlan",
    "Tiers",
    "candidate_pool",
    "deduplicate",
    "exhausted",
    "merge_kind_fallback",
    "named_participants",
    "needs_wider_pool",
    "passes_time",
    "plan_search",
    "rank_search",
    "rrf_fuse",
    "unit_vector",
]

Best = Mapping[str, tuple[Entry, float]]
"""Each fused candidate's entry and best leg score, by entry id."""
DEFAULT_MIN_SCORE = 0.30
DEDUPE_JACCARD = 0.80
MIN_KIND_FALLBACK_RESULTS = 3


class Legs(NamedTuple):
    """Scored candidates of one query, best first: (entry, absolute score)."""

    vector: list[tuple[Entry, float]] | None
    """None when the backend has no embedder (keyword-only)."""
    keyword: list[tuple[Entry, float]]


def candidate_pool(max_results: int, fusion: FusionSettings | None = None) -> int:
    """How many candidates each leg returns in a search's first tier: `min_pool`, whatever
    `max_results` is, so that asking for more results never reorders the first ones
    (a page is a slice of one order; `Tiers` fetches deeper pools when one is not enough).
    `max_results` is kept for callers; it no longer changes the pool."""
    del max_results
    return (fusion or FusionSettings()).min_pool


POOL_GROWTH = 4
"""Each tier's pool is this many times the previous one's."""
MAX_POOL = 6_400
"""No tier is deeper than this (100, 400, 1,600, 6,400: at most four fetches)."""


def unit_vector(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """`values` as float32 scaled to length 1 (a zero vector as it is): a stored or
    query vector in this form makes the vector leg's score a dot product, the cosine
    `rank_search` expects."""
    vector = np.asarray(values, dtype=np.float32)
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


def passes_time(
    event_time: datetime | None, after: datetime | None, before: datetime | None
) -> bool:
    """Entries without an event time always pass the time range."""
    if event_time is None:
        return True
    if after is not None and event_time < after:
        return False
    return before is None or event_time <= before


def _sort_key(entry: Entry, primary: float, by_event_time: bool) -> tuple[object, ...]:
    """Relevance desc, then event time asc (when asked), updated desc, created desc, id."""
    event = entry.memory.event_time
    event_key: tuple[int, float] = (0, 0.0)
    if by_event_time:
        event_key = (1, 0.0) if event is None else (0, event.timestamp())
    return (
        -primary,
        event_key,
        -entry.updated_at.timestamp(),
        -entry.created_at.timestamp(),
        entry.id,
    )


def rrf_fuse(rankings: Sequence[Sequence[str]], k: int = 60) -> dict[str, float]:
    """Reciprocal Rank Fusion: each list adds 1 / (k + rank), rank starting at 1."""
    fused: dict[str, float] = {}
    for ranking in rankings:
        for rank, key in enumerate(ranking, start=1):
            fused[key] = fused.get(key, 0.0) + 1.0 / (k + rank)
    return fused


RANK_TIE_DIGITS = 6
"""Leg scores equal to this many decimals (after clipping to [0, 1]) share an RRF rank:
float32 cosines of identical vectors differ by about 1e-7 between an index and an
exact scan, and a rank must not be decided by rounding noise."""
_TIE_GAP = 2 * 10.0**-RANK_TIE_DIGITS


def _rrf_with_ties(
    legs: Sequence[Sequence[tuple[Entry, float]]], k: int, weights: Sequence[float] = ()
) -> dict[str, float]:
    """RRF where leg i adds weights[i] / (k + rank) (1.0 when not given) and scores equal
    to `RANK_TIE_DIGITS` decimals, clipped to [0, 1] as reported, share a rank: identical
    memories tie (and the event-time tie-break can order them)."""
    fused: dict[str, float] = {}
    for i, leg in enumerate(legs):
        weight = weights[i] if i < len(weights) else 1.0
        rank, last = 0, math.nan
        for position, (entry, raw) in enumerate(leg, start=1):
            clipped = 0.0 if raw < 0.0 else 1.0 if raw > 1.0 else raw
            # Scores more than 2e-6 apart never round to the same 6 decimals: only
            # near-equal neighbours need the exact comparison.
            if clipped != last and not (
                abs(clipped - last) <= _TIE_GAP
                and round(clipped, RANK_TIE_DIGITS) == round(last, RANK_TIE_DIGITS)
            ):
                rank = position
            last = clipped
            fused[entry.id] = fused.get(entry.id, 0.0) + weight / (k + rank)
    return fused


def named_participants(
    query: str, entries: Iterable[Entry], language: Language = ENGLISH
) -> set[str]:
    """Participants (as spelled on the entries) whose every name token occurs in the query."""
    people = {person for entry in entries for person in entry.memory.participants}
    if not people:
        return set()
    query_tokens = set(primary_tokens(query, language))
    return {
        person
        for person in people
        if (tokens := set(primary_tokens(person, language))) and tokens <= query_tokens
    }


def _prefer(fused: dict[str, float], preferred: set[str], boost: float) -> dict[str, float]:
    """Scale every other hit by 1 / (1 + boost), when some hit is preferred: a
    preference, not a filter (a question's dates are often only near the evidence's)."""
    if not preferred:
        return fused
    scale = 1.0 / (1.0 + boost)
    return {key: s if key in preferred else s * scale for key, s in fused.items()}


def _in_query_period(best: Best, query: str, language: Language) -> set[str]:
    """The "time" step's preferred hits: event time in a period the query names."""
    periods = query_periods(query, language)
    return {
        key
        for key, (entry, _) in best.items()
        if periods
        and (event := entry.memory.event_time) is not None
        and any(p.contains(event) for p in periods)
    }


def _in_implied_period(best: Best, query: str, language: Language) -> set[str]:
    """The "implied time" step's preferred hits: event time in a period the query names,
    or a time the text tells of, counted back from the event time, that meets it
    (`periods.implied_spans`: "I went to a convention last month", said in April, is
    found by "in March")."""
    periods = query_periods(query, language)
    if not periods:
        return set()
    preferred = set()
    for key, (entry, _) in best.items():
        event = entry.memory.event_time
        if event is None:
            continue
        spans = implied_spans(entry.memory.text, event, language)
        if any(p.contains(event) or any(overlaps(p, s) for s in spans) for p in periods):
            preferred.add(key)
    return preferred


def _saying_time(
    best: Best, query: str, language: Language, says: Callable[[str], bool]
) -> set[str]:
    """The "when" step's preferred hits, for a query matching the language's
    `when_question`: those that say a time (`says`: `says_time` in the language,
    or the service's `TimeMentions`). An answer to "When did Ann adopt Rex?"
    reads "I adopted him last week", while the turns that only talk about Rex
    do not date anything."""
    if language.when_question is None or not language.when_question.search(query):
        return set()
    return {key for key, (entry, _) in best.items() if says(entry.memory.text)}


def _naming_participant(best: Best, query: str, language: Language) -> set[str]:
    """The "participants" step's preferred hits: those with a participant the query names."""
    named = named_participants(query, (entry for entry, _ in best.values()), language)
    return {
        key for key, (entry, _) in best.items() if named.intersection(entry.memory.participants)
    }


def _session_context(fused: dict[str, float], best: Best, weight: float) -> dict[str, float]:
    """The "context" step (`FusionSettings.context_weight`): (own + w x other) / (1 + w)."""
    adjusted = dict(fused)
    groups: dict[datetime, list[str]] = {}
    for key, (entry, _) in best.items():
        event = entry.memory.event_time
        if event is not None and key in fused:
            groups.setdefault(event, []).append(key)
    for keys in groups.values():
        if len(keys) < 2:
            continue
        ranked = sorted(keys, key=lambda k: -fused[k])
        top, second = fused[ranked[0]], fused[ranked[1]]
        for key in keys:
            context = second if key == ranked[0] else top
            adjusted[key] = (fused[key] + weight * context) / (1 + weight)
    return adjusted


SESSION_BEST = 3
"""The session-first step scores a session by the mean of this many best candidates."""


def _sessions(fused: Mapping[str, float], best: Best, alone: bool = True) -> list[list[Entry]]:
    """The fused candidates grouped by event time (one session), each in creation order;
    a candidate without an event time is a session of its own (left out unless `alone`)."""
    groups: dict[datetime | str, list[Entry]] = {}
    for key, (entry, _) in best.items():
        event = entry.memory.event_time
        if key in fused and (event is not None or alone):
            groups.setdefault(event or key, []).append(entry)
    return [
        sorted(g, key=lambda e: (e.created_at, e.id)) if len(g) > 1 else g for g in groups.values()
    ]


def _session_first(fused: dict[str, float], best: Best, weight: float) -> dict[str, float]:
    """The "session-first" step (`FusionSettings.session_weight`): a session is scored by
    the mean of its `SESSION_BEST` best fused candidates (missing ones count 0), and each
    hit takes (own + w x session) / (1 + w): a session with several good hits ranks its
    turns above a lone match elsewhere."""
    adjusted = dict(fused)
    for group in _sessions(fused, best):
        top = sorted((fused[e.id] for e in group), reverse=True)[:SESSION_BEST]
        session = sum(top) / SESSION_BEST
        for entry in group:
            adjusted[entry.id] = (fused[entry.id] + weight * session) / (1 + weight)
    return adjusted


NEIGHBOUR_CAP = 1.0 - 1e-9
"""A capped neighbour gain stops at this fraction of the score it borrows (just below)."""


def _is_reply(entry: Entry, after: Entry) -> bool:
    """Whether `after` can be a reply to `entry`: both name participants, not the same set."""
    said, answered = entry.memory.participants, after.memory.participants
    return bool(said and answered) and {p.casefold() for p in said} != {
        p.casefold() for p in answered
    }


def _neighbours(
    fused: dict[str, float],
    best: Best,
    weight: float,
    capped: bool = False,
    replies_only: bool = False,
) -> dict[str, float]:
    """The "neighbours" step (`FusionSettings.neighbour_weight`): each hit gains w x the
    fused score of the candidate just after it in creation order with its event time (one
    session): a turn that the next one answers is found through the reply's words too,
    the reverse of the context topics, which index a reply with the turn before it.
    Memories stamped with the same creation time have no order: no gain. With
    `replies_only` (`neighbour_replies_only`) only a reply by other participants
    (`_is_reply`) counts; when `capped` (`neighbour_capped`) a hit stays just below the
    reply it borrows from, so it never overtakes it (an exact match written after it)."""
    adjusted = dict(fused)
    for group in _sessions(fused, best, alone=False):
        for entry, reply in zip(group, group[1:], strict=False):
            if reply.created_at <= entry.created_at:
                continue
            if replies_only and not _is_reply(entry, reply):
                continue
            own, borrowed = fused[entry.id], fused[reply.id]
            gained = own + weight * borrowed
            if capped:
                gained = max(own, min(gained, borrowed * NEIGHBOUR_CAP))
            adjusted[entry.id] = gained
    return adjusted


def _diversified(fused: dict[str, float], best: Best, weight: float) -> dict[str, float]:
    """The "diversity" step (`FusionSettings.session_diversity`): within each session
    (same event time), the j-th best candidate (j from 0) is scaled by 1 / (1 + w x j),
    so a session's later hits, which mostly repeat its best one, make room for other
    sessions' (evidence of a multi-hop question lies in several). Memories without an
    event time are sessions of their own: untouched."""
    adjusted = dict(fused)
    for group in _sessions(fused, best, alone=False):
        # Ties ordered as the result orders them (newest first), so the first stays first.
        ranked = sorted(group, key=lambda e: _sort_key(e, fused[e.id], False))
        for j, entry in enumerate(ranked[1:], start=1):
            adjusted[entry.id] = fused[entry.id] / (1 + weight * j)
    return adjusted


FEEDBACK_DOCS = 3
"""Feedback reads the terms of this many best keyword hits."""
FEEDBACK_TERMS = 5
"""and keeps this many of them (most frequent in those hits, then rarest in the pool)."""


def _feedback(
    fused: dict[str, float],
    best: Best,
    keyword: Sequence[tuple[Entry, float]],
    query: str,
    weight: float,
    k: int | None,
    language: Language,
) -> dict[str, float]:
    """Pseudo-relevance feedback on the keyword leg, without a second fetch: the terms
    of the `FEEDBACK_DOCS` best keyword hits that the query lacks, ranked by how many of
    those hits hold them, then by rarity among the candidates, form one more query; it
    scores the candidates by keyword relevance and votes like `_decomposed`'s
    sub-queries (half its relevance under score fusion, 1 / (k + rank) under RRF)."""
    skip = set(primary_tokens(query, language)) | language.stemmed_question_words
    held: dict[str, int] = {}
    for entry, _ in keyword[:FEEDBACK_DOCS]:
        for term in set(primary_tokens(entry.memory.text, language)) - skip:
            held[term] = held.get(term, 0) + 1
    if not held:
        return fused
    pool = _PoolTerms.build(best, set(held), language)
    terms = sorted(held, key=lambda t: (-held[t], -pool.stats.idf(t), t))[:FEEDBACK_TERMS]
    expansion = QueryTerms(" ".join(terms), tuple(terms), tuple((t, 1.0) for t in terms))
    out = dict(fused)
    for rank, (key, score) in enumerate(pool.ranked(expansion), start=1):
        out[key] += weight * (score / 2 if k is None else 1 / (k + rank))
    return out


def _score_fusion(
    vector: Sequence[tuple[Entry, float]],
    keyword: Sequence[tuple[Entry, float]],
    vector_weight: float = 1.0,
) -> dict[str, float]:
    """`fusion_method="scores"` (described at `SearchOptions.fusion_method`)."""
    fused: dict[str, float] = {}
    for leg, weight in ((vector, vector_weight), (keyword, 1.0)):
        for entry, score in leg:
            fused[entry.id] = fused.get(entry.id, 0.0) + weight * min(score, 1.0) / 2
    return fused


def _fused_order(
    vector: list[tuple[Entry, float]],
    keyword: list[tuple[Entry, float]],
    best: Best,
    plain: dict[str, float],
    options: SearchOptions,
    language: Language,
    says: Callable[[str], bool],
) -> dict[str, float]:
    """The fused score that orders hybrid hits: the fusion method, then each enabled step
    (decompose, feedback, context, session-first, neighbours, participants, time,
    implied time, when, diversity)
    in that order."""
    tuning = options.fusion
    fused = (
        plain
        if options.fusion_method == "rrf"
        else _score_fusion(vector, keyword, tuning.vector_weight)
    )
    if tuning.decompose_weight > 0:
        k = options.rrf_k if options.fusion_method == "rrf" else None
        fused = _decomposed(fused, best, options.query, tuning, k, language)
    if tuning.feedback_weight > 0:
        k = options.rrf_k if options.fusion_method == "rrf" else None
        fused = _feedback(fused, best, keyword, options.query, tuning.feedback_weight, k, language)
    if tuning.context_weight > 0:
        fused = _session_context(fused, best, tuning.context_weight)
    if tuning.session_weight > 0:
        fused = _session_first(fused, best, tuning.session_weight)
    if tuning.neighbour_weight > 0:
        fused = _neighbours(
            fused,
            best,
            tuning.neighbour_weight,
            tuning.neighbour_capped,
            tuning.neighbour_replies_only,
        )
    for boost, preferred in (
        (tuning.participant_boost, _naming_participant),
        (tuning.time_boost, _in_query_period),
        (tuning.implied_time_boost, _in_implied_period),
        (tuning.when_boost, partial(_saying_time, says=says)),
    ):
        if boost > 0:
            fused = _prefer(fused, preferred(best, options.query, language), boost)
    if tuning.session_diversity > 0:
        fused = _diversified(fused, best, tuning.session_diversity)
    return fused


_CLAUSE_SPLIT = re.compile(r"\s*(?:[,;?!]|\band\b|\bor\b|\bbut\b)\s*", re.I)


def _sub_queries(query: str, named: set[str], language: Language) -> list[QueryTerms]:
    """Short searches a question breaks into: its clauses when it has several,
    else each content word (minus participant names) when it has 2-5 of them."""
    clauses = [c for c in _CLAUSE_SPLIT.split(query) if primary_tokens(c, language)]
    names = {t for person in named for t in primary_tokens(person, language)}
    if len(clauses) >= 2:
        return [QueryTerms.build(c, language=language) for c in clauses]
    light = language.stemmed_question_words
    tokens = dict.fromkeys(primary_tokens(query, language))
    words = [t for t in tokens if t not in light and t not in names]
    if 2 <= len(words) <= 5:
        return [QueryTerms.build(w, language=language) for w in words]
    return []


def _decomposed(
    fused: dict[str, float],
    best: Best,
    query: str,
    tuning: FusionSettings,
    k: int | None,
    language: Language,
) -> dict[str, float]:
    """Query decomposition without an LLM: each sub-query (`_sub_queries`) scores the
    candidates already fetched by the local keyword score (no backend call) and
    votes like one more keyword leg with decompose_weight / n: 1 / (k + rank)
    under RRF (`k`), half its keyword relevance under score fusion (`k` None).
    The candidates are tokenised once per search (`_PoolTerms`). Off by default
    (docs/bench-locomo.md)."""
    named = named_participants(query, (entry for entry, _ in best.values()), language)
    subs = _sub_queries(query, named, language)
    if not subs:
        return fused
    out = dict(fused)
    pool = _PoolTerms.build(best, {t for sub in subs for t in sub.tokens}, language)
    weight = tuning.decompose_weight / len(subs)
    for sub in subs:
        for rank, (key, score) in enumerate(pool.ranked(sub), start=1):
            out[key] += weight * (score / 2 if k is None else 1 / (k + rank))
    return out


@dataclass(frozen=True)
class _PoolTerms:
    """The fetched candidates as a small corpus of their own, for decomposition.

    Each `KeywordDoc` keeps its true field lengths but only the frequencies of the
    sub-queries' `terms`, so `keyword_score` gives each sub-query the figures a fully
    tokenised pool would. Sub-queries hold a token, so the phrase fallback never applies.
    """

    docs: dict[str, KeywordDoc]
    stats: CorpusStats
    holders: dict[str, list[str]]
    """term -> candidate keys holding it, in `docs` order."""

    @classmethod
    def build(cls, best: Best, terms: set[str], language: Language) -> _PoolTerms:
        docs: dict[str, KeywordDoc] = {}
        holders: dict[str, list[str]] = {t: [] for t in terms}
        for key, (entry, _) in best.items():
            memory = entry.memory
            docs[key] = doc = keyword_doc(
                fts_document(memory.text, language),
                topics_document(keys_of(memory), language),
                terms,
            )
            for term in doc.terms:
                holders[term].append(key)
        return cls(docs, CorpusStats.from_docs(docs.values()), holders)

    def ranked(self, sub: QueryTerms) -> list[tuple[str, float]]:
        """Candidates with a positive score for `sub`, best first (ties in pool order)."""
        holding = {key for term in sub.tokens for key in self.holders.get(term, ())}
        scored = [
            (key, keyword_score(sub, doc, self.stats))
            for key, doc in self.docs.items()
            if key in holding
        ]
        return sorted((h for h in scored if h[1] > 0), key=lambda h: -h[1])


def _ranked(
    hits: Iterable[tuple[Entry, float, float | None]],
    by_event_time: bool,
    limit: int | None,
    order: Mapping[str, float] | None = None,
) -> list[Entry]:
    """Sort (entry, score, rrf) by `_sort_key` of the score, or of `order` (entry id ->
    fused score, for hybrid hits), then copy scores onto the first `limit` only (a pydantic
    copy costs more than ranking, and a search keeps a few of hundreds). Only hits at or
    above the `limit`-th best (ties included) can place: the tie-break key is built for those.
    """
    items = list(hits)
    primaries = [score if order is None else order[entry.id] for entry, score, _ in items]
    chosen = list(zip(primaries, items, strict=True))
    if limit is not None and 0 < limit < len(chosen):
        cut = sorted(primaries, reverse=True)[limit - 1]
        chosen = [pair for pair in chosen if pair[0] >= cut]
    chosen.sort(key=lambda pair: _sort_key(pair[1][0], pair[0], by_event_time))
    return [
        entry.model_copy(update={"score": score, "rrf_score": rrf})
        for _, (entry, score, rrf) in chosen[:limit]
    ]


def _by_score(hits: list[tuple[Entry, float]]) -> list[tuple[Entry, float]]:
    return sorted(hits, key=lambda hit: -hit[1])


def _rank_legs(
    legs: Legs,
    options: SearchOptions,
    language: Language,
    says: Callable[[str], bool],
    limit: int | None = None,
) -> list[Entry]:
    explicit = options.similarity_threshold
    keyword_min = options.fusion.keyword_floor if explicit is None else explicit
    keyword = [(e, s) for e, s in legs.keyword if s >= keyword_min and s > 0]
    by_event = options.order_by_event_time
    if legs.vector is None or (options.hybrid and not legs.vector and keyword):
        return _ranked(((e, s, None) for e, s in keyword), by_event, limit)
    if not options.hybrid:
        threshold = DEFAULT_MIN_SCORE if explicit is None else explicit
        vector = [(e, s) for e, s in legs.vector if s >= threshold]
        return _ranked(((e, s, None) for e, s in vector), by_event, limit)
    # Hybrid: each leg votes with its candidates above a low floor (or the explicit threshold).
    vector_floor = options.fusion.vector_floor if explicit is None else explicit
    # Each leg is ranked by its reported score (stable): PostgreSQL's keyword rows arrive
    # in ts_rank order, not in the order of the shared relevance computed afterwards.
    vector = _by_score([(e, s) for e, s in legs.vector if s >= vector_floor and s > 0])
    keyword = _by_score(keyword)
    best: dict[str, tuple[Entry, float]] = {}
    for entry, score in chain(vector, keyword):
        held = best.get(entry.id)
        if held is None or score > held[1]:
            best[entry.id] = (entry, score)
    plain = _rrf_with_ties([vector, keyword], options.rrf_k, (options.fusion.vector_weight, 1.0))
    fused = _fused_order(vector, keyword, best, plain, options, language, says)
    keys: Iterable[str] = plain
    if limit is not None and 0 < limit < len(fused):
        # Only hits at or above the limit-th fused score can be ranked into the result.
        cut = sorted(fused.values(), reverse=True)[limit - 1]
        keys = [key for key in plain if fused[key] >= cut]
    return _ranked(
        ((best[key][0], max(0.0, min(best[key][1], 1.0)), plain[key]) for key in keys),
        by_event,
        limit,
        fused,
    )


def merge_kind_fallback(primary: list[Entry], fallback: list[Entry], kind: Kind) -> list[Entry]:
    """Primary hits, then unseen fallback hits of the wanted kind, then the rest."""
    seen = {e.id for e in primary}
    extra = [e for e in fallback if e.id not in seen]
    return primary + sorted(extra, key=lambda e: e.memory.kind != kind)  # stable: order kept


def deduplicate(
    entries: Sequence[Entry], threshold: float = DEDUPE_JACCARD, language: Language = ENGLISH
) -> list[Entry]:
    """Drop an entry whose word set is >= `threshold` Jaccard-similar to a better-ranked one."""
    sets = [token_set(e.memory.text, language) for e in entries]
    return [
        entry
        for i, entry in enumerate(entries)
        if not any(jaccard(sets[i], sets[j]) >= threshold for j in range(i))
    ]


def _unexpired_legs(legs: Legs) -> Legs:
    """Drop candidates whose `expires_at` has passed (every backend searches through here)."""
    now = datetime.now(timezone.utc)

    def keep(hits: list[tuple[Entry, float]]) -> list[tuple[Entry, float]]:
        if all(e.expires_at is None for e, _ in hits):
            return hits
        return [(e, s) for e, s in hits if e.expires_at is None or e.expires_at > now]

    return Legs(None if legs.vector is None else keep(legs.vector), keep(legs.keyword))


@dataclass(frozen=True)
class SearchPlan:
    """What one search fetches, decided before any I/O: a plain value.

    Each of `kinds` is one fetch of `Legs` (`pool` candidates each, filtered by that
    kind and the time range): the wanted kind, then None (every kind) when the kind
    fallback may need it. The backend fetches a vector leg when it embeds the query,
    a keyword leg without one or for a hybrid search.
    """

    kinds: tuple[Kind | None, ...]
    """Empty for a blank query: nothing to fetch, no results."""
    pool: int
    """Candidates per leg (`candidate_pool`)."""
    limit: int | None
    """How many hits ranking keeps of the first fetch (None: all, for dedupe or the fallback)."""

    @property
    def fallback(self) -> bool:
        """Whether an unfiltered fetch follows the kind's (merged when it ranks < 3 hits)."""
        return len(self.kinds) > 1


def plan_search(options: SearchOptions) -> SearchPlan:
    """The fetches of a search (none for a blank query)."""
    pool = candidate_pool(options.max_results, options.fusion)
    if not options.query.strip():
        return SearchPlan((), pool, options.max_results)
    fallback = options.kind is not None and options.kind_fallback
    # Dedupe and the kind fallback look past the first max_results; otherwise only they are kept.
    limit = None if options.deduplicate or fallback else options.max_results
    kinds = (options.kind, None) if fallback else (options.kind,)
    return SearchPlan(kinds, pool, limit)


def rank_search(
    plan: SearchPlan,
    fetched: Mapping[Kind | None, Legs],
    options: SearchOptions,
    language: Language = ENGLISH,
    says: Callable[[str], bool] | None = None,
    keep: int | None = None,
) -> list[Entry]:
    """The final hits, a pure function of the plan, the legs fetched for each of
    `plan.kinds` and the options: expired candidates out, `_fused_order`, the kind
    fallback, dedupe, the first `keep` (max_results when None). `language` is the
    service's; `says` tells whether a text says a time (its `TimeMentions`;
    `says_time` when None).
    """
    if not plan.kinds:
        return []
    if says is None:
        says = partial(says_time, language=language)
    legs = _unexpired_legs(fetched[plan.kinds[0]])
    results = _rank_legs(legs, options, language, says, plan.limit)
    if plan.fallback and options.kind is not None and len(results) < MIN_KIND_FALLBACK_RESULTS:
        second = _rank_legs(_unexpired_legs(fetched[None]), options, language, says)
        results = merge_kind_fallback(results, second, options.kind)
    if options.deduplicate:
        results = deduplicate(results, language=language)
    return results[: options.max_results if keep is None else keep]


def exhausted(fetched: Iterable[Legs], pool: int, options: SearchOptions) -> bool:
    """Whether a deeper pool could add no result: every leg came back short of `pool`,
    or its last candidate (legs come best first) is already below the leg's floor."""
    explicit = options.similarity_threshold
    floors = (
        options.fusion.vector_floor if explicit is None else explicit,
        options.fusion.keyword_floor if explicit is None else explicit,
    )
    if not options.hybrid and explicit is None:
        floors = (DEFAULT_MIN_SCORE, floors[1])
    for legs in fetched:
        for leg, floor in ((legs.vector, floors[0]), (legs.keyword, floors[1])):
            if leg is not None and len(leg) >= pool and leg[-1][1] >= floor:
                return False
    return True


def needs_wider_pool(
    results: Sequence[Entry], legs: Iterable[Legs], pool: int, options: SearchOptions
) -> bool:
    """Whether the full pool might rank differently than a narrow vector-only fetch
    (`reads.Fetched.narrowed`, `pool` each) that came back full: when dedupe (or the
    kind fallback's filters) left fewer than max_results, or when its farthest
    candidate ties the last result (an unseen candidate could tie too, and win the
    tie-break)."""
    threshold = options.similarity_threshold
    threshold = DEFAULT_MIN_SCORE if threshold is None else threshold
    for leg in legs:
        if leg.vector is None or len(leg.vector) < pool:
            continue
        farthest = leg.vector[-1][1]
        if len(results) < options.max_results:
            if farthest >= threshold:
                return True
        elif results and farthest >= (results[-1].score or 0.0):
            return True
    return False


class Tiers:
    """The candidate pools of one search, so that a page is a slice of one stable order.

    The order is the ranking of the first tier (`SearchPlan.pool` per leg), then the
    hits a tier `POOL_GROWTH` times deeper adds, and so on: a deeper tier is fetched
    only while fewer than max_results were ranked and a leg may hold more. Each tier is
    ranked as a whole, independent of max_results, so asking for more results only
    appends (PostgreSQL paging repeated and skipped items when the pool grew with
    max_results, issue 32).
    """

    def __init__(self, plan: SearchPlan, options: SearchOptions, language: Language) -> None:
        self.options = options
        self.language = language
        self.current = plan
        self.results: list[Entry] = []
        self.done = not plan.kinds

    @property
    def keep(self) -> int:
        """How many of the current tier's hits to rank: enough to add max_results new ones."""
        return self.options.max_results + len(self.results)

    def add(self, ranked: list[Entry], fetched: Iterable[Legs]) -> None:
        """Append the current tier's new hits; plan the next tier, or finish."""
        seen = {e.id for e in self.results}
        merged = self.results + [e for e in ranked if e.id not in seen]
        if self.options.deduplicate and self.results:
            merged = deduplicate(merged, language=self.language)
        self.results = merged
        pool = self.current.pool
        if (
            len(merged) >= self.options.max_results
            or pool >= MAX_POOL
            or exhausted(fetched, pool, self.options)
        ):
            self.done = True
            return
        limit = None if self.current.limit is None else self.keep
        deeper = min(pool * POOL_GROWTH, MAX_POOL)
        self.current = SearchPlan(self.current.kinds, deeper, limit)

    @property
    def final(self) -> list[Entry]:
        return self.results[: self.options.max_results]
