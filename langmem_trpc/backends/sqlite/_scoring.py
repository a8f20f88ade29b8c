"""The shared keyword composite over many FTS candidates at once, with numpy.

`keyword_score` costs about 7 us per candidate in Python and the keyword leg
rescores up to 150 of them, which was the largest part of a warm search.
`score_candidates` computes the same formula for a whole candidate list as
float64 array operations, in the same order of operations as the reference
(element-wise IEEE arithmetic, sums accumulated token by token), so the
scores are bit-identical; `tests/backends/test_sqlite.py` checks this against
`keyword_score` on random documents. Only the in-order phrase bonus stays a
Python loop, over the rows matching two or more query tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...service._search import (
    BM25_B,
    BM25_K1,
    PHRASE_WEIGHT,
    TOPIC_WEIGHT,
    CorpusStats,
    KeywordDoc,
    QueryTerms,
    _in_order,
    composite_base,
    keyword_score,
)

__all__ = ["bm25", "length_norm", "score_candidates"]


def bm25(tf: np.ndarray, norm: np.ndarray) -> np.ndarray:
    """`_bm25` of the reference, element-wise; `norm` is K1 x (1 - B + B x len / avg)."""
    out: np.ndarray = tf * (BM25_K1 + 1) / (tf + norm)
    return out


def length_norm(lengths: np.ndarray, avg: float) -> np.ndarray:
    out: np.ndarray = BM25_K1 * (1 - BM25_B + BM25_B * lengths / avg)
    return out


def score_candidates(
    terms: QueryTerms, docs: Sequence[KeywordDoc], stats: CorpusStats
) -> np.ndarray:
    """`keyword_score(terms, doc, stats)` for every doc, as a float64 array."""
    n = len(docs)
    scores = np.zeros(n)
    if n == 0:
        return scores
    content_norm = length_norm(
        np.array([d.content_len for d in docs], dtype=np.float64), stats.avg_content_len
    )
    topic_norm = length_norm(
        np.array([d.topic_len for d in docs], dtype=np.float64), stats.avg_topic_len
    )
    total_weight = sum(w for _, w in terms.weighted)
    total_idf = 0.0
    raw = np.zeros(n)
    potential = np.zeros(n)
    matched_weight = np.zeros(n)
    matched_idf = np.zeros(n)
    any_hit = np.zeros(n, dtype=bool)
    hits: dict[str, np.ndarray] = {}
    for token, weight in terms.weighted:
        idf = stats.idf(token)
        total_idf += weight * idf
        if idf <= 0:
            continue
        content_tf = np.array([d.content_tf.get(token, 0) for d in docs], dtype=np.float64)
        topic_tf = np.array([d.topic_tf.get(token, 0) for d in docs], dtype=np.float64)
        scale = weight * idf
        term = scale * (bm25(content_tf, content_norm) + TOPIC_WEIGHT * bm25(topic_tf, topic_norm))
        hit = term > 0
        raw += np.where(hit, term, 0.0)
        matched_weight += np.where(hit, weight, 0.0)
        matched_idf += np.where(hit, scale, 0.0)
        potential += np.where(hit, scale * (BM25_K1 + 1), 0.0)
        any_hit |= hit
        hits[token] = hits[token] | hit if token in hits else hit
    with np.errstate(divide="ignore", invalid="ignore"):
        strength = np.where(potential > 0, np.minimum(raw / potential, 1.0), 0.0)
    coverage = matched_weight / max(total_weight, 1.0)
    rarity = matched_idf / max(total_idf, 1.0)
    phrase = np.zeros(n)
    primary = [(t, hits[t]) for t in terms.primary if t in hits]
    if len(primary) >= 2:
        n_matched = np.sum([h for _, h in primary], axis=0)
        for i in np.flatnonzero(n_matched >= 2).tolist():
            in_query_order = [t for t, h in primary if h[i]]
            doc = docs[i]
            if _in_order(in_query_order, doc.content_seq):
                phrase[i] = 1.0
            elif all(t in doc.topic_tf for t in in_query_order):
                phrase[i] = 0.8
    scores = np.minimum(composite_base(coverage, rarity, strength) + PHRASE_WEIGHT * phrase, 1.0)
    for i in np.flatnonzero(~any_hit).tolist():  # no token matched: the reference's fallback
        scores[i] = keyword_score(terms, docs[i], stats)
    return scores
