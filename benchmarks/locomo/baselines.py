"""Baseline arm: stock `bm25s` (Lucene BM25, k1 1.5, b 0.75, English stopwords).

It ranks the unit texts alone, tokenised with the library's Snowball stemmer
(PyStemmer "english"), as a plain BM25 script would; the library's keyword
leg also reads each unit's topics. Needs the `bench` extra.
"""

from __future__ import annotations

from collections.abc import Callable

from .units import UnitRecord

__all__ = ["BASELINES", "Ranker", "bm25s_ranker"]

Ranked = list[tuple[tuple[str, ...], str]]
Ranker = Callable[[str, int], Ranked]


def bm25s_ranker(units: list[UnitRecord]) -> Ranker:
    """A `rank(question, depth)` over `units`: (dia ids, text) best first."""
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    texts = [u.text for u in units]
    retriever = bm25s.BM25()
    retriever.index(
        bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False),
        show_progress=False,
    )

    def rank(question: str, depth: int) -> Ranked:
        tokens = bm25s.tokenize([question], stopwords="en", stemmer=stemmer, show_progress=False)
        if not tokens.vocab:
            return []
        k = min(depth, len(texts))
        docs, scores = retriever.retrieve(tokens, k=k, show_progress=False)
        return [
            (units[int(i)].dia_ids, texts[int(i)])
            for i, s in zip(docs[0].tolist(), scores[0].tolist(), strict=True)
            if s > 0
        ]

    return rank


BASELINES: dict[str, Callable[[list[UnitRecord]], Ranker]] = {"bm25s": bm25s_ranker}
