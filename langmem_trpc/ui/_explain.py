"""The search playground: why a memory was, or was not, found.

Only the service's own search (`asearch`, the shared pipeline on every
backend) with other `SearchOptions`; nothing is re-ranked here:
* fused: the search as asked;
* vector leg: `hybrid=False` with the hybrid vector floor as threshold;
* keyword leg: hybrid with `vector_floor=1.0` and every fusion signal off, so
  only keyword candidates vote (and a vector score of exactly 1.0: the query);
* each signal's effect: the fused search with that one signal off.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..service.protocol import MemoryService
from ..types import FUSION_STEPS_OFF, Entry, FusionSettings, SearchOptions, UserKey

SIGNALS: dict[str, dict[str, float]] = {
    label: {name: FUSION_STEPS_OFF[name]}
    for label, name in (
        ("question words", "question_word_weight"),
        ("session context", "context_weight"),
        ("participant boost", "participant_boost"),
        ("time boost", "time_boost"),
        ("'when' boost", "when_boost"),
        ("name masking", "mask_names"),
    )
}
"""Each fusion signal the playground switches off, by label: the FusionSettings change."""

SIGNAL_LEGEND: dict[str, str] = {
    "fused": "the rank the agent's memory_search returns (blank: below the cut-off)",
    "score": "relevance in [0, 1]: the higher of the cosine and the keyword relevance",
    "rrf": "Reciprocal Rank Fusion: the sum of w / (60 + rank) over the vector and keyword legs",
    "vector rank": "the rank by embedding similarity alone (cosine in brackets)",
    "keyword rank": "the rank by keyword match (BM25F) alone (relevance in brackets)",
    "without question words": "question words (what, did, you) weigh as much as other words",
    "without session context": "a hit no longer shares in the score of hits from the same moment",
    "without participant boost": "a person named in the query no longer favours their memories",
    "without time boost": "a period named in the query (in May 2023) no longer favours it",
    "without 'when' boost": "a 'when' question no longer favours memories that state a time",
    "without name masking": "a person named in the query is embedded as written, not as 'they'",
}
"""One line per playground column: what it shows (the legend under the table)."""


@dataclass
class ExplainedRow:
    entry: Entry
    fused_rank: int | None = None
    fused_score: float | None = None
    rrf: float | None = None
    vector_rank: int | None = None
    vector_score: float | None = None
    keyword_rank: int | None = None
    keyword_score: float | None = None
    without: dict[str, int | None] = field(default_factory=dict)
    """Signal label -> the fused rank with that signal off (None: not in the results)."""


@dataclass
class Explained:
    query: str
    rows: list[ExplainedRow]
    has_vectors: bool
    signals: list[str]


Ranks = dict[str, tuple[int, Entry]]
"""Memory id -> (rank from 1, entry) in one search's results."""


async def explain_search(
    service: MemoryService, user: UserKey, options: SearchOptions
) -> Explained:
    """Fused, vector and keyword ranks of `options.query` and each signal's effect:
    every memory any search returned, in fused order, then the left-out ones (best leg first)."""
    query = options.query

    async def ranks(asked: SearchOptions) -> Ranks:
        hits = await service.asearch(user, query, asked)
        return {e.id: (rank, e) for rank, e in enumerate(hits, start=1)}

    deep = min(1000, max(3 * options.max_results, 30))  # the legs look past the cut-off
    depth = options.model_copy(
        update={"deduplicate": False, "kind_fallback": False, "max_results": deep}
    )
    fused = await ranks(options)
    keyword_fusion = FusionSettings(
        **{**options.fusion.model_dump(), **FUSION_STEPS_OFF, "vector_floor": 1.0}
    )
    keyword = await ranks(depth.model_copy(update={"hybrid": True, "fusion": keyword_fusion}))
    vector: Ranks = {}
    if service.supports_vectors:
        floor = options.similarity_threshold
        floor = options.fusion.vector_floor if floor is None else floor
        vector = await ranks(
            depth.model_copy(update={"hybrid": False, "similarity_threshold": floor})
        )
    without = {
        label: await ranks(
            options.model_copy(update={"fusion": options.fusion.model_copy(update=change)})
        )
        for label, change in SIGNALS.items()
    }
    return Explained(
        query=query,
        rows=_rows(fused, vector, keyword, without),
        has_vectors=service.supports_vectors,
        signals=list(SIGNALS),
    )


def _rows(
    fused: Ranks, vector: Ranks, keyword: Ranks, without: dict[str, Ranks]
) -> list[ExplainedRow]:
    """One row per memory any search returned, in fused order, then the left-out ones
    (best leg first)."""
    rows: dict[str, ExplainedRow] = {}
    for source in (fused, vector, keyword, *without.values()):
        for key, (_, entry) in source.items():
            rows.setdefault(key, ExplainedRow(entry=entry))
    for key, row in rows.items():
        if key in fused:
            row.fused_rank, hit = fused[key]
            row.fused_score, row.rrf = hit.score, hit.rrf_score
        if key in vector:
            row.vector_rank, hit = vector[key]
            row.vector_score = hit.score
        if key in keyword:
            row.keyword_rank, hit = keyword[key]
            row.keyword_score = hit.score
        row.without = {
            label: ranks[key][0] if key in ranks else None for label, ranks in without.items()
        }
    big = 10**9

    def order(row: ExplainedRow) -> tuple[int, int, str]:
        best_leg = min(row.vector_rank or big, row.keyword_rank or big)
        return (row.fused_rank or big, best_leg, row.entry.id)

    return sorted(rows.values(), key=order)
