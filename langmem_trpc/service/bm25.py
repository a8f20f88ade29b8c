"""The keyword leg's scorer, written once: BM25F over a memory's text and topics
(Snowball-stemmed tokens, CJK trigrams), its absolute [0, 1] `relevance`, and
the literal phrase fallback for queries without a scorable token. Every
backend scores with these functions (`service/search.py` re-exports them).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from ..types import SearchOptions
from .language import ENGLISH, Language
from .text import cjk_trigrams, primary_tokens

__all__ = [
    "BM25_B",
    "BM25_K1",
    "DEFAULT_QUESTION_WORD_WEIGHT",
    "IDF_PRIOR_DOCS",
    "PHRASE_FALLBACK_SCORE",
    "RELEVANCE_KNEE",
    "TOPIC_WEIGHT",
    "TRIGRAM_WEIGHT",
    "CorpusStats",
    "KeywordDoc",
    "KeywordScorer",
    "QueryTerms",
    "bm25_term",
    "field_tf",
    "keyword_score",
    "length_norm",
    "loose_text",
    "relevance",
    "score_candidates",
]

BM25_K1 = 1.2
BM25_B = 0.75
TOPIC_WEIGHT = 0.65
"""BM25F weight of the topics field against the text (1.0)."""
TRIGRAM_WEIGHT = 0.45
"""Query weight of a CJK trigram that is not also a primary token."""
PHRASE_FALLBACK_SCORE = 0.35
RELEVANCE_KNEE = 0.9
"""Where `relevance` stops being the identity and saturates towards 1."""
IDF_PRIOR_DOCS = 10
"""Background documents, holding none of the query's terms, added to N for idf: a
user's first few memories must not make every word they hold look common (with
N = 1, idf puts a word of the only memory at a fifth of an unseen word's weight,
and any query with one unseen word scored below reconcile's 0.30 probe). Changes
nothing that matters at LoCoMo sizes (N = 400-900)."""


@dataclass(frozen=True)
class KeywordDoc:
    """Term frequencies of one memory's two fields (text and topics)."""

    content_tf: Mapping[str, int]
    content_len: int
    topic_tf: Mapping[str, int]
    topic_len: int
    content_norm: str
    topic_norm: str

    @property
    def terms(self) -> set[str]:
        return set(self.content_tf) | set(self.topic_tf)

    @classmethod
    def build(cls, text: str, topics: Sequence[str], language: Language = ENGLISH) -> KeywordDoc:
        content_tf = field_tf(text, language)
        topic_text = " ".join(topics)
        topic_tf = field_tf(topic_text, language)
        return cls(
            content_tf=content_tf,
            content_len=sum(content_tf.values()),
            topic_tf=topic_tf,
            topic_len=sum(topic_tf.values()),
            content_norm=loose_text(text),
            topic_norm=loose_text(topic_text),
        )


def field_tf(text: str, language: Language) -> dict[str, int]:
    """Term frequencies of one field: primary tokens counted, extra CJK trigrams once."""
    tf: dict[str, int] = dict(Counter(primary_tokens(text, language)))
    for gram in cjk_trigrams(text):
        tf.setdefault(gram, 1)
    return tf


def loose_text(text: str) -> str:
    """Non letters/digits become spaces, runs collapse: for the phrase fallback."""
    return " ".join("".join(c if c.isalnum() else " " for c in text.lower()).split())


@dataclass(frozen=True)
class CorpusStats:
    """What BM25 needs about the user's whole memory set."""

    n_docs: int
    df: Mapping[str, int]
    avg_content_len: float
    avg_topic_len: float

    @classmethod
    def from_docs(cls, docs: Iterable[KeywordDoc]) -> CorpusStats:
        df: Counter[str] = Counter()
        n = content = topic = 0
        for doc in docs:
            n += 1
            content += doc.content_len
            topic += doc.topic_len
            df.update(doc.terms)
        return cls.of_totals(n, df, content, topic)

    @classmethod
    def of_totals(cls, n: int, df: Mapping[str, int], content: int, topic: int) -> CorpusStats:
        """`n` documents whose fields hold `content` and `topic` tokens in all (averages >= 1)."""
        return cls(n, df, max(content / n, 1.0) if n else 1.0, max(topic / n, 1.0) if n else 1.0)

    def idf(self, term: str) -> float:
        """Lucene's BM25 idf, log(1 + (N - df + 0.5) / (df + 0.5)), with N counting
        `IDF_PRIOR_DOCS` background documents: always > 0. `KeywordScorer` computes
        it once per query term for a whole leg."""
        df = self.df.get(term, 0)
        n = self.n_docs + IDF_PRIOR_DOCS
        return math.log(1 + (n - df + 0.5) / (df + 0.5))


DEFAULT_QUESTION_WORD_WEIGHT = 0.1


@dataclass(frozen=True)
class QueryTerms:
    """A query's weighted tokens: primary 1.0, extra CJK trigrams `TRIGRAM_WEIGHT`,
    the language's question words `question_word_weight` (1.0 turns that step off).

    Question words ("what", "did", "you") are frequent in conversational text;
    at a low weight they only break ties.
    """

    raw: str
    primary: tuple[str, ...]
    weighted: tuple[tuple[str, float], ...] = field(default=())

    @classmethod
    def build(
        cls,
        query: str,
        question_word_weight: float = DEFAULT_QUESTION_WORD_WEIGHT,
        language: Language = ENGLISH,
    ) -> QueryTerms:
        primary = tuple(dict.fromkeys(primary_tokens(query, language)))
        light = language.stemmed_question_words
        weighted = [(t, question_word_weight if t in light else 1.0) for t in primary]
        weighted += [(g, TRIGRAM_WEIGHT) for g in cjk_trigrams(query) if g not in primary]
        return cls(raw=query, primary=primary, weighted=tuple(weighted))

    @classmethod
    def of(cls, options: SearchOptions, language: Language = ENGLISH) -> QueryTerms:
        """The terms of a search, as every backend's keyword leg weighs them."""
        return cls.build(options.query, options.fusion.question_word_weight, language)

    @property
    def tokens(self) -> list[str]:
        return [t for t, _ in self.weighted]

    def reference(self, stats: CorpusStats) -> float:
        """The BM25 of an average-length memory holding each query term once in its
        text (each term contributes weight x idf): `relevance` divides by it."""
        return sum(w * stats.idf(t) for t, w in self.weighted)


_Scores = TypeVar("_Scores", float, np.ndarray)
"""A float, or a numpy array of one leg's candidates: the formulas serve both."""


def length_norm(length: _Scores, avg: float) -> _Scores:
    """BM25's length normalisation of one field: 1 - b + b x len / avg."""
    return 1 - BM25_B + BM25_B * length / avg


def bm25_term(
    weight_idf: float,
    content_tf: _Scores,
    content_norm: _Scores,
    topic_tf: _Scores,
    topic_norm: _Scores,
) -> _Scores:
    """One query term's BM25F contribution, for floats or numpy arrays alike.

    The fields' length-normalised frequencies are summed (topics weighted
    `TOPIC_WEIGHT`) and saturated once: tf x (k1 + 1) / (k1 + tf), times the
    term's weight x idf.
    """
    tf = content_tf / content_norm + TOPIC_WEIGHT * topic_tf / topic_norm
    term: _Scores = weight_idf * tf * (BM25_K1 + 1) / (BM25_K1 + tf)
    return term


def relevance(score: _Scores, reference: float) -> _Scores:
    """The absolute [0, 1] relevance of a BM25 score, strictly increasing in it.

    x = score / `QueryTerms.reference` is 1.0 for an average-length memory
    holding every query term once, 0.5 when it holds half the query's idf
    mass, and at most k1 + 1. Up to `RELEVANCE_KNEE` the relevance is x;
    above, it saturates smoothly towards 1 (same slope at the knee), so it
    never ties two different BM25 scores and stays usable as a threshold
    (reconcile: 0.30 / 0.60 / 0.90).
    """
    x = np.asarray(score, dtype=np.float64) / max(reference, 1e-12)
    over = np.maximum(x - RELEVANCE_KNEE, 0.0)
    soft = 1 - RELEVANCE_KNEE
    out = np.minimum(x, RELEVANCE_KNEE) + soft * (1 - np.exp(-over / soft))
    return out if isinstance(score, np.ndarray) else float(out)


@dataclass(frozen=True)
class KeywordScorer:
    """One query against one corpus: each term's weight x idf and the `reference`,
    computed once, then `score` for every candidate of a leg."""

    query: QueryTerms
    stats: CorpusStats
    weights: tuple[tuple[str, float], ...]
    """(token, weight x idf), in query order."""
    reference: float

    @classmethod
    def of(cls, query: QueryTerms, stats: CorpusStats) -> KeywordScorer:
        weights = tuple((t, w * stats.idf(t)) for t, w in query.weighted)
        return cls(query, stats, weights, query.reference(stats))

    def score(self, doc: KeywordDoc) -> float:
        """`keyword_score(query, doc, stats)`."""
        content_norm = length_norm(doc.content_len, self.stats.avg_content_len)
        topic_norm = length_norm(doc.topic_len, self.stats.avg_topic_len)
        raw = 0.0
        for token, weight_idf in self.weights:
            content_tf = doc.content_tf.get(token, 0)
            topic_tf = doc.topic_tf.get(token, 0)
            if content_tf or topic_tf:
                raw += bm25_term(weight_idf, content_tf, content_norm, topic_tf, topic_norm)
        if raw <= 0:
            return _phrase_fallback(self.query.raw, doc, not self.query.primary)
        return relevance(raw, self.reference)


def keyword_score(query: QueryTerms, doc: KeywordDoc, stats: CorpusStats) -> float:
    """Absolute keyword relevance in [0, 1]: `relevance` of the memory's BM25F score, or
    a literal phrase match ("C#") when no token matches. Never normalised by the best
    hit, so comparable across queries (a reconcile threshold). Many candidates: one
    `KeywordScorer`."""
    return KeywordScorer.of(query, stats).score(doc)


def _phrase_fallback(query: str, doc: KeywordDoc, untokenised: bool) -> float:
    """Queries with no scorable token ("C#", "a-b") can still match literally."""
    lowered = query.strip().lower()
    if not lowered:
        return 0.0
    if untokenised and any(c.isalnum() for c in lowered):
        needle = lowered
        if any(not c.isalnum() and not c.isspace() for c in lowered):
            needle = loose_text(lowered)
    else:
        needle = loose_text(lowered)
        if needle.isascii() and needle.isalnum():
            return 0.0
    if not needle:
        return 0.0
    if needle in doc.content_norm:
        return PHRASE_FALLBACK_SCORE
    if needle in doc.topic_norm:
        return PHRASE_FALLBACK_SCORE * TOPIC_WEIGHT
    return 0.0


def score_candidates(
    terms: QueryTerms, docs: Sequence[KeywordDoc], stats: CorpusStats
) -> np.ndarray:
    """`keyword_score(terms, doc, stats)` for every doc, as one float64 array: the exact
    same scores (terms summed in query order), vectorised with numpy for a backend
    that rescores many candidates at once (`keyword_score` costs microseconds each)."""
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
