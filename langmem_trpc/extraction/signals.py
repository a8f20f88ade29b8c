"""Values that make two similar sentences say different things ("runs Go 1.23" vs
"runs Go 1.24": near-identical tokens). Reconcile and preserve_history check that
numbers, dates, negations and names agree before calling two memories the same.
"""

from __future__ import annotations

import re

__all__ = ["CRITICAL_RE", "critical_values", "names", "negations", "values_agree"]

NUMBER_RE = re.compile(r"\d+(?:[.:/,-]\d+)*")
_NEGATIONS = r"\bnot\b|\bno\b|\bnever\b|\bwithout\b|n't|不再|不是|没有|从未|未|无"
NEGATION_RE = re.compile(_NEGATIONS, re.IGNORECASE)
#: Numbers and negations, as the history-preserving policy compares them (spec 4.3 rule 5).
CRITICAL_RE = re.compile(rf"\b[0-9]+(?:[.:/-][0-9]+)*\b|(?:{_NEGATIONS})", re.IGNORECASE)
_MONTHS = (
    "january february march april june july august september october november december "
    "jan feb mar apr jun jul aug sep sept oct nov dec"
)
_DAYS = "monday tuesday wednesday thursday friday saturday sunday today yesterday tomorrow tonight weekend"
DATE_WORD_RE = re.compile(
    r"\b(?:" + "|".join((_MONTHS + " " + _DAYS).split()) + r")\b", re.IGNORECASE
)
_MAY_RE = re.compile(r"\bMay\b")  # the month, not the verb
_CAPITALISED_RE = re.compile(r"\b[A-Z][A-Za-z0-9_-]*\b")
_SENTENCE_END = ".!?:;\n"


def numbers(text: str) -> frozenset[str]:
    return frozenset(NUMBER_RE.findall(text))


def date_words(text: str) -> frozenset[str]:
    found = {m.lower() for m in DATE_WORD_RE.findall(text)}
    if _MAY_RE.search(text):
        found.add("may")
    return frozenset(found)


def negations(text: str) -> tuple[str, ...]:
    """Sorted negation markers (a signature: "not" twice differs from once)."""
    return tuple(sorted(m.lower() for m in NEGATION_RE.findall(text)))


def names(text: str) -> frozenset[str]:
    """Capitalised words that are not capitalised only because a sentence starts there."""
    found: set[str] = set()
    for match in _CAPITALISED_RE.finditer(text):
        before = text[: match.start()].rstrip()
        if not before or before[-1] in _SENTENCE_END or match.group() == "I":
            continue
        found.add(match.group().lower())
    return frozenset(found)


def critical_values(text: str) -> frozenset[str]:
    return frozenset(m.lower() for m in CRITICAL_RE.findall(text))


def values_agree(a: str, b: str) -> bool:
    """True when numbers, date words, negations and names are the same in both texts."""
    return (
        numbers(a) == numbers(b)
        and date_words(a) == date_words(b)
        and negations(a) == negations(b)
        and names(a) == names(b)
    )
