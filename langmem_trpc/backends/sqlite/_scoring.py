"""The shared keyword score over many FTS candidates at once, with numpy.

`keyword_score` costs microseconds per candidate in Python. The shared `bm25_term`
and `relevance` on float64 arrays, terms summed in query order like the reference,
give its exact scores (`tests/backends/test_sqlite.py` checks on random documents).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...service.bm25 import (
    CorpusStats,
    KeywordDoc,
    QueryTerms,
    bm25_term,
    keyword_score,
    length_norm,
    relevance,
)


def score_candidates(
    terms: QueryTerms, docs: Sequence[KeywordDoc], stats: CorpusStats
) -> np.ndarray:
    """`keyword_score(terms, doc, stats)` for every doc, as a float64 array."""
    content_norm = length_norm(
        np.array([d.content_len for d in docs], dtype=np.float64), stats.avg_content_len
    )
    topic_norm = length_norm(
        np.array([d.topic_len for d in docs], dtype=np.float64), stats.avg_topic_len
    )
    raw = np.zeros(len(docs))
    for token, weight in terms.weighted:
        content_tf = np.array([d.content_tf.get(token, 0) for d in docs], dtype=np.float64)
        topic_tf = np.array([d.topic_tf.get(token, 0) for d in docs], dtype=np.float64)
        raw += bm25_term(weight * stats.idf(token), content_tf, content_norm, topic_tf, topic_norm)
    scores = relevance(raw, terms.reference(stats))
    for i in np.flatnonzero(raw <= 0).tolist():  # no token matched: the reference's fallback
        scores[i] = keyword_score(terms, docs[i], stats)
    return scores
