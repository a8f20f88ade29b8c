"""The search statement: SQL text per leg combination, its parameters, and its rows read back.

Nothing here does I/O. One statement fetches both legs' candidates of every kind
of a `reads.FetchLegs` step (the kind fallback's unfiltered fetch too), ranked
afterwards by the shared plan (`service.reads.search`, `rank_search`); see
docs/backends.md ("Hybrid search: one statement").
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from ...service.bm25 import CorpusStats, KeywordDoc, KeywordScorer, QueryTerms
from ...service.documents import keys_of, keyword_doc
from ...service.language import ENGLISH, Language
from ...service.rules import utcnow
from ...service.validity import view_of
from ...types import Entry, Kind, SearchOptions, UserKey
from ._sql import Params, Row, user_params, vector_param, view_name, view_params

_FILTERS = """
      AND ({kind}::text IS NULL OR m.kind = {kind})
      AND (%(after)s::timestamptz IS NULL OR m.event_time IS NULL OR m.event_time >= %(after)s)
      AND (%(before)s::timestamptz IS NULL OR m.event_time IS NULL OR m.event_time <= %(before)s)
      {validity}"""

_VALIDITY = {
    "current": "AND m.superseded_by IS NULL AND (m.valid_to IS NULL OR m.valid_to > %(now)s)",
    "as_of": "AND m.valid_from <= %(as_of)s AND (m.valid_to IS NULL OR m.valid_to > %(as_of)s)",
    "all": "",
}
"""The validity view inside every leg (`_sql.VIEW_FILTERS`, `m.`-qualified), so old
versions never take a candidate's place; the current view's `superseded_by IS NULL`
lets small users' scans walk `langmem_memories_current`."""

_LIVE_USER = "m.app_name = %(app)s AND m.user_id = %(user)s AND m.deleted_at IS NULL"

_VERSION = "m.xmin::text AS version, m.updated_at"
"""Each candidate's row version, read with the candidate: the entry cache's key."""

# vec_ann orders by the half-precision HNSW index's expression, exactly; small users'
# pending rows are already in vec_exact, so vec_pending reads big users' only
_VECTOR_LEG = f"""
vec_ann{{s}} AS (
    -- big users: the HNSW index, with pgvector 0.8 iterative scans so the
    -- per-user filter does not starve the candidate list
    SELECT m.id, m.embedding <=> %(q)b::vector AS dist, {_VERSION}
    FROM langmem_memories m
    WHERE {_LIVE_USER} AND m.indexed {_FILTERS}
      AND (SELECT n FROM stats) > %(exact_max)s
    ORDER BY m.embedding::halfvec({{dims}}) <=> %(q)b::vector::halfvec({{dims}})
    LIMIT %(pool)s),
vec_pending{{s}} AS (
    -- big users' rows of a deferred bulk load, not yet in the HNSW graph
    -- (`index_pending`): exact distances over them (partial btree; empty when none)
    SELECT * FROM (
        SELECT m.id, m.embedding <=> %(q)b::vector AS dist, {_VERSION}
        FROM langmem_memories m
        WHERE {_LIVE_USER} AND NOT m.indexed {_FILTERS}
          AND (SELECT n FROM stats) > %(exact_max)s
        OFFSET 0) p
    ORDER BY dist, id
    LIMIT %(pool)s),
vec_exact{{s}} AS (
    -- small users: exact distances over the user's rows (btree), no index recall loss
    SELECT * FROM (
        SELECT m.id, m.embedding <=> %(q)b::vector AS dist, {_VERSION}
        FROM langmem_memories m
        WHERE {_LIVE_USER} {_FILTERS}
          AND (SELECT n FROM stats) <= %(exact_max)s
        OFFSET 0) e
    ORDER BY dist, id
    LIMIT %(pool)s),
vec{{s}} AS (
    SELECT id, dist, version, updated_at, row_number() OVER (ORDER BY dist, id) AS r
    FROM (SELECT * FROM vec_ann{{s}} UNION ALL SELECT * FROM vec_pending{{s}}
          UNION ALL SELECT * FROM vec_exact{{s}}) u
    WHERE dist IS NOT NULL AND dist <> 'NaN'::float8
    ORDER BY dist, id
    LIMIT %(pool)s),"""

_HEAVY_VECTOR_LEG = """
vec{s} AS (
    -- users known to be above `exact_max`: the HNSW index, through the function that
    -- pins its own plan to it (vector migration 5), plus their rows not yet indexed
    SELECT id, dist, version, updated_at, row_number() OVER (ORDER BY dist, id) AS r
    FROM langmem_ann_candidates(%(app)s, %(user)s, %(q)b::vector, {kind}, %(after)s,
                                %(before)s, %(pool)s, %(now)s, %(as_of)s)
    WHERE dist IS NOT NULL AND dist <> 'NaN'::float8
    ORDER BY dist, id
    LIMIT %(pool)s),"""

_ANN_PART = """
SELECT {part} AS part, id, dist, version, updated_at, n
FROM langmem_ann_candidates(%(app)s, %(user)s, %(q)b::vector, {kind}, %(after)s,
                            %(before)s, %(pool)s, %(now)s, %(as_of)s)"""


def ann_candidates_sql(parts: int) -> str:
    """A heavy user's vector-only search, without the fused statement: the candidates,
    their row versions (for the entry cache) and the live count, for each fetch of a
    plan (`part` 0: the kind, 1: every kind)."""
    return "\nUNION ALL".join(_ANN_PART.format(part=i, kind=_KINDS[i]) for i in range(parts))


_NO_VECTOR_LEG = """
vec{s} AS (SELECT NULL::text AS id, NULL::float8 AS dist, NULL::text AS version,
               NULL::timestamptz AS updated_at, NULL::bigint AS r WHERE false),"""

_VECTOR_LEGS = {"sql": _VECTOR_LEG, "heavy": _HEAVY_VECTOR_LEG, "none": _NO_VECTOR_LEG}

_KEYWORD_COLUMNS = "m.id, m.tsv, m.xmin::text AS version, m.updated_at, m.content_doc, m.topic_doc"

_KEYWORD_LEG = f"""
kw{{s}} AS (
    SELECT id, version, updated_at, content_doc, topic_doc,
           row_number() OVER (ORDER BY rank DESC, id) AS r FROM (
        SELECT c.*, ts_rank(c.tsv, (SELECT tsq FROM dfs)) AS rank FROM (
            -- at most `budget` matching rows are ranked; when even the rarest token
            -- matches more (heavy users, common words), the most recently updated
            SELECT m.* FROM (
                -- big users: the GIN index (its posting lists span every user)
                SELECT {_KEYWORD_COLUMNS} FROM langmem_memories m
                WHERE {_LIVE_USER} {_FILTERS}
                  AND {{match}} AND (SELECT n FROM stats) > %(kw_scan_max)s
                UNION ALL
                -- small users: match over the user's own rows (btree), so the cost
                -- does not grow with the table (GIN took 1-4 ms at 100k rows)
                SELECT m.id, m.tsv, m.version, m.updated_at, m.content_doc, m.topic_doc FROM (
                    SELECT {_KEYWORD_COLUMNS}, m.text, m.topics, m.participants, m.location
                    FROM langmem_memories m
                    WHERE {_LIVE_USER} {_FILTERS}
                      AND (SELECT n FROM stats) <= %(kw_scan_max)s
                    OFFSET 0) m
                WHERE {{match}}) m
            ORDER BY m.updated_at DESC
            LIMIT %(budget)s) c
        ORDER BY rank DESC, c.id
        LIMIT %(kw_pool)s) k),"""

_NO_KEYWORD_LEG = """
kw{s} AS (SELECT NULL::text AS id, NULL::text AS version, NULL::timestamptz AS updated_at,
              NULL::text AS content_doc, NULL::text AS topic_doc, NULL::bigint AS r
       WHERE false),"""

_KEYWORD_LEGS = {
    # separate statements, not one `tsv @@ q OR (like IS NOT NULL AND ...)`: under a
    # generic plan that OR cannot use the GIN index, and a heavy user's every row
    # was scanned (85 ms at 100k rows)
    "tsq": _KEYWORD_LEG.replace("{match}", "m.tsv @@ (SELECT tsq FROM dfs)"),
    # queries without a scorable token ("C#"): substring prefilter for the phrase fallback
    "like": _KEYWORD_LEG.replace(
        "{match}",
        "lower(m.text || ' ' || array_to_string(m.topics || m.participants, ' ') || ' '"
        " || coalesce(m.location, '')) LIKE ALL (%(like)s::text[])",
    ),
    "none": _NO_KEYWORD_LEG,
}

_FUSED = """
fused{s} AS (
    -- every leg read its candidates' row versions and the keyword leg their
    -- documents, so no candidate is probed again
    SELECT coalesce(v.id, k.id) AS id, v.r AS vrank, k.r AS krank, v.dist,
           coalesce(1.0 / (%(rrf_k)s + v.r), 0) + coalesce(1.0 / (%(rrf_k)s + k.r), 0) AS rrf,
           coalesce(v.version, k.version) AS version,
           coalesce(v.updated_at, k.updated_at) AS updated_at, k.content_doc, k.topic_doc
    FROM vec{s} v FULL OUTER JOIN kw{s} k ON v.id = k.id)"""

_SELECT = """
SELECT f.part, f.vrank, f.krank, f.dist, f.rrf::float8 AS rrf, s.n, s.content_sum,
       s.topic_sum, d.df, f.content_doc, f.topic_doc, f.id, f.version, f.updated_at
FROM ({parts}) f
CROSS JOIN stats s
CROSS JOIN dfs d
ORDER BY f.part, f.rrf DESC, f.updated_at DESC, f.id"""

_STATS = """
WITH stats AS MATERIALIZED (
    SELECT coalesce(max(live_count), 0) AS n, coalesce(max(content_len_sum), 0) AS content_sum,
           coalesce(max(topic_len_sum), 0) AS topic_sum
    FROM langmem_user_stats WHERE app_name = %(app)s AND user_id = %(user)s),
terms AS MATERIALIZED (
    -- document frequency of each query token among the user's live rows
    SELECT t.i, t.lexeme, coalesce(u.df, 0) AS df
    FROM unnest(%(df_terms)s::text[], %(lexemes)s::text[]) WITH ORDINALITY AS t(term, lexeme, i)
    LEFT JOIN langmem_user_terms u
      ON u.app_name = %(app)s AND u.user_id = %(user)s AND u.term = t.term),
dfs AS MATERIALIZED (
    -- the keyword leg matches the rarest tokens whose rows fit the budget
    -- (always at least one): the same as all tokens for all but heavy users
    SELECT ARRAY(SELECT df FROM terms ORDER BY i) AS df,
           (SELECT string_agg(lexeme, ' | ') FROM (
                SELECT lexeme, sum(df) OVER w AS cum, row_number() OVER w AS rn
                FROM terms WINDOW w AS (ORDER BY df, i)) r
            WHERE cum <= %(budget)s OR rn = 1)::tsquery AS tsq),"""


_SUFFIXES = ("", "_all")
"""CTE name suffix of each fetch of a plan: the kind's, then every kind's (the fallback)."""
_KINDS = ("%(kind)s", "NULL::text")
"""The kind filter of each fetch: the `kind` parameter, then none (a constant NULL, which
the planner folds away even in a generic plan)."""


@functools.lru_cache(maxsize=64)
def search_sql(vector: str, keyword: str, dims: int, parts: int = 1, view: str = "current") -> str:
    """The fused statement for one leg combination: `vector` "sql", "heavy" or "none",
    `keyword` "tsq", "like" or "none" (`dims` names the ANN index expression), over
    `parts` fetches (1, or 2 with the kind fallback's unfiltered fetch; the rows'
    `part` says which), filtered by the validity `view` (`_sql.view_name`). Memoised:
    a pure function of these few values, no user data.
    """
    # per fetch: its vector and keyword legs and their fusion
    legs = _VECTOR_LEGS[vector] + _KEYWORD_LEGS[keyword] + _FUSED
    validity = _VALIDITY[view]
    ctes = ",".join(
        legs.format(s=_SUFFIXES[part], kind=_KINDS[part], dims=int(dims), validity=validity)
        for part in range(parts)
    )
    fused = " UNION ALL ".join(
        f"SELECT {part} AS part, * FROM fused{_SUFFIXES[part]}" for part in range(parts)
    )
    return _STATS + ctes + _SELECT.format(parts=fused)


KEYWORD_SCAN_MAX = 1_000
"""Users with at most this many live rows are keyword-matched over their own rows, not GIN."""

KEYWORD_BUDGET = 2_000
"""Matching rows the keyword leg ranks at most (summed df of the tokens it uses)."""


def tsquery_literal(term: str) -> str:
    """One lexeme as tsquery input, quoted so no user character is ever read as an operator."""
    return "'" + term.replace("\\", "\\\\").replace("'", "''") + "'"


def _like_words(query: str, terms: QueryTerms) -> list[str] | None:
    """Substring prefilter for the phrase fallback when the query has no scorable token ("C#")."""
    if terms.primary:
        return None
    words = "".join(c if c.isalnum() else " " for c in query.lower()).split()
    if not words:
        return None
    escaped = (w.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") for w in words)
    return ["%" + w + "%" for w in escaped]


@dataclass(slots=True)
class SearchQuery:
    """One candidate fetch: SQL text and parameters, and how to read its rows back."""

    sql: str
    params: Params
    terms: QueryTerms
    vector: bool
    language: Language = ENGLISH


def build_search(
    user: UserKey,
    options: SearchOptions,
    kind: Kind | None,
    pool: int,
    query_vector: Sequence[float] | None,
    exact_max: int,
    heavy: bool = False,
    dims: int = 0,
    language: Language = ENGLISH,
    fallback: bool = False,
    now: datetime | None = None,
) -> SearchQuery:
    """The one statement that fetches a search plan's legs: those of `kind` and, with
    `fallback`, those of every kind (the kind fallback's), as rows of `part` 0 and 1.

    The keyword leg runs without an embedder and for hybrid search; without an
    embedder it reads a wider slice than `pool`, since the final order is the
    keyword relevance, not ts_rank. `heavy`: the user is known to be above
    `exact_max`, so the vector leg goes straight to the HNSW index. The validity view
    is `options`' (`validity.view_of`), current at `now` (default: the client's clock).
    """
    view = view_of(options)
    terms = QueryTerms.of(options, language)
    use_vector = query_vector is not None
    use_keyword = not use_vector or options.hybrid
    like = _like_words(options.query, terms) if use_keyword else None
    tokens = terms.tokens
    params: Params = user_params(
        user,
        q=vector_param(query_vector),
        like=like,
        df_terms=tokens if use_keyword else [],
        lexemes=[tsquery_literal(t) for t in tokens] if use_keyword else [],
        budget=KEYWORD_BUDGET,
        kw_scan_max=KEYWORD_SCAN_MAX,
        kind=None if kind is None else kind.value,
        after=options.time_after,
        before=options.time_before,
        pool=pool,
        kw_pool=pool if use_vector else max(pool * 4, 200),
        rrf_k=options.rrf_k,
        exact_max=exact_max,
        **view_params(view, now or utcnow()),
    )
    dims = dims or len(query_vector or ())
    keyword_leg = ("tsq" if like is None else "like") if use_keyword else "none"
    vector_leg = ("heavy" if heavy else "sql") if use_vector else "none"
    sql = search_sql(vector_leg, keyword_leg, dims, 2 if fallback else 1, view_name(view))
    return SearchQuery(sql, params, terms, use_vector, language)


Leg = list[tuple[Entry, float]]


def legs_from_rows(
    query: SearchQuery, rows: Sequence[Row], entries: Mapping[str, Entry], part: int = 0
) -> tuple[Leg | None, Leg]:
    """Rows of the fused statement -> (vector leg, keyword leg) of fetch `part`, each in
    its SQL rank order, with absolute scores: cosine, and the shared keyword relevance
    (computed here, with the user's corpus stats from the same statement), never
    ts_rank. `entries` holds the candidates' entries by id (a row deleted since is left out).
    """
    vector: list[tuple[int, Entry, float]] = []
    keyword: list[tuple[int, Entry, float]] = []
    scorer: KeywordScorer | None = None
    for row in rows:
        entry = entries.get(row["id"])
        if entry is None or row["part"] != part:
            continue
        if row["vrank"] is not None:
            dist = float(row["dist"])
            score = 0.0 if math.isnan(dist) else max(0.0, 1.0 - dist)
            vector.append((row["vrank"], entry, score))
        if row["krank"] is not None:
            if scorer is None:
                n = int(row["n"])  # BM25 stats of the query's tokens: all the score looks up
                stats = CorpusStats(
                    n_docs=n,
                    df=dict(zip(query.terms.tokens, (int(x) for x in row["df"]), strict=True)),
                    avg_content_len=max(int(row["content_sum"]) / n, 1.0) if n else 1.0,
                    avg_topic_len=max(int(row["topic_sum"]) / n, 1.0) if n else 1.0,
                )
                scorer = KeywordScorer.of(query.terms, stats)
            doc = _candidate_doc(query, row, entry)
            keyword.append((row["krank"], entry, scorer.score(doc)))
    vector.sort(key=lambda item: item[0])
    keyword.sort(key=lambda item: item[0])
    return (
        [(e, s) for _, e, s in vector] if query.vector else None,
        [(e, s) for _, e, s in keyword],
    )


def vector_leg_from_ann(
    rows: Sequence[Row], entries: Mapping[str, Entry], pool: int, part: int = 0
) -> Leg:
    """Rows of `ann_candidates_sql` (indexed and pending hits) -> the vector leg of fetch
    `part`, as the fused statement's `vec` ranks them: nearest `pool`, by distance
    then id, no NaN."""
    hits = sorted(
        (float(r["dist"]), r["id"])
        for r in rows
        if r["part"] == part
        and r["dist"] is not None
        and not math.isnan(r["dist"])
        and r["id"] in entries
    )
    return [(entries[i], max(0.0, 1.0 - dist)) for dist, i in hits[:pool]]


def _candidate_doc(query: SearchQuery, row: Row, entry: Entry) -> KeywordDoc:
    """The stored documents split back into a `KeywordDoc` (no tokenizer run). A row the
    tsquery matched holds a query token, so the phrase fallback (which needs the text)
    never runs for it; rows found by the substring prefilter, and rows written before
    migration 6 was backfilled, are tokenised as before."""
    content, topics = row["content_doc"], row["topic_doc"]
    if content is None or topics is None or query.params["like"] is not None:
        return KeywordDoc.build(entry.memory.text, keys_of(entry.memory), query.language)
    return keyword_doc(content, topics, query.terms.tokens)
