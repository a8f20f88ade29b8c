"""The official LoCoMo QA metric, re-implemented from its protocol.

Token F1 of normalised (no commas, case, punctuation or a/an/the/and) and
stemmed answers; cat 1 averages over the gold's comma parts, cat 3 scores the
gold before the first `;`, cat 5 is 1 when the prediction abstains. The stemmer
is the library's Snowball English (Porter2), not NLTK's Porter: they conflate
a few LoCoMo gold words differently (docs/bench-locomo.md, "Stemmer").
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable

from langmem_trpc.service.language import ENGLISH

__all__ = [
    "ABSTENTION_PHRASES",
    "aggregate",
    "category_score",
    "f1_score",
    "normalize_answer",
    "score_answer",
]

ABSTENTION_PHRASES = ("no information available", "not mentioned")

_PUNCT = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")


def normalize_answer(text: str) -> str:
    text = text.replace(",", "").lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def f1_score(prediction: str, gold: str) -> float:
    """Multiset token F1 of the normalised, stemmed strings."""
    pred = [ENGLISH.stem(t) for t in normalize_answer(prediction).split()]
    truth = [ENGLISH.stem(t) for t in normalize_answer(gold).split()]
    common = sum((Counter(pred) & Counter(truth)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(truth)
    return 2 * precision * recall / (precision + recall)


def score_answer(prediction: str, gold: str | None, category: int) -> float:
    """Score one prediction by the official per-category rule."""
    if category == 5:
        lowered = prediction.lower()
        return 1.0 if any(phrase in lowered for phrase in ABSTENTION_PHRASES) else 0.0
    gold = "" if gold is None else str(gold)
    if category == 1:  # each gold part scores its best-matching prediction part
        preds = [p.strip() for p in prediction.split(",")]
        golds = [g.strip() for g in gold.split(",")]
        return sum(max(f1_score(p, g) for p in preds) for g in golds) / len(golds)
    if category == 3:
        gold = gold.split(";")[0].strip()
    return f1_score(prediction, gold)


def aggregate(scores: Iterable[tuple[int, float]]) -> dict[str, float]:
    """Per-category means (keys "1".."5"), "overall" (all cats, / all questions) and "overall_no5"."""
    by_cat: dict[int, list[float]] = {}
    for category, value in scores:
        by_cat.setdefault(category, []).append(value)
    out: dict[str, float] = {str(c): sum(v) / len(v) for c, v in sorted(by_cat.items())}
    every = [v for vs in by_cat.values() for v in vs]
    answerable = [v for c, vs in by_cat.items() if c != 5 for v in vs]
    if every:
        out["overall"] = sum(every) / len(every)
    if answerable:
        out["overall_no5"] = sum(answerable) / len(answerable)
    return out


category_score = aggregate
"""Alias kept for readability at call sites: see `aggregate`."""
