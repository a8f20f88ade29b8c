"""Values that make two similar sentences say different things ("runs Go 1.23" vs
"runs Go 1.24": near-identical tokens). Reconcile and preserve_history check that
numbers, dates, negations and names agree before calling two memories the same.

Numbers are compared as values: "2 kids" and "two kids", "$100k" and "$100,000"
state one number, "two cats" and "three cats" two (`numbers`; number words per
language in `NUMBER_WORDS`).

`state_change` is the second signal of a supersede (extraction/supersede.py): the
new text drops a value the old one stated (a number, a date word, a name), flips
a negation, or carries a change marker ("now", "no longer", "upgraded", ...; per
language in `CHANGE_MARKERS`) that the old text does not. A text that only adds
values (an enrichment) or rewords them (a paraphrase) changes no state.
"""

from __future__ import annotations

import re
from functools import cache

from ..service.language import ENGLISH, Language

__all__ = [
    "CHANGE_MARKERS",
    "CRITICAL_RE",
    "NUMBER_WORDS",
    "change_marker",
    "critical_values",
    "names",
    "negations",
    "number_words",
    "numbers",
    "state_change",
    "values_agree",
]

_NEGATIONS = r"\bnot\b|\bno\b|\bnever\b|\bwithout\b|n['\u2019]t|不再|不是|没有|从未|未|无"
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


def numbers(text: str, language: Language = ENGLISH) -> frozenset[str]:
    """The numbers `text` states, each as one spelling: digits without thousands
    separators ("100,000" and "100k" -> "100000"), and the language's number words
    as digits ("twenty-five" -> "25"). Versions, dates and ranges ("1.23",
    "2024-03-01", "2-3") stay as written."""
    found = {_digits(m.group(1), bool(m.group(2))) for m in _NUMBER_K_RE.finditer(text)}
    return frozenset(found | _spelled_numbers(text, language.name))


_NUMBER_K_RE = re.compile(r"(\d+(?:[.:/,-]\d+)*)([kK]\b)?")
_THOUSANDS_RE = re.compile(r"\d{1,3}(?:,\d{3})+")


def _digits(number: str, thousands: bool) -> str:
    """One spelling of a number written in digits (`thousands`: it had a "k" suffix)."""
    if _THOUSANDS_RE.fullmatch(number):
        number = number.replace(",", "")
    if not thousands:
        return number
    whole, _, fraction = number.partition(".")
    if not whole.isdigit() or not (fraction.isdigit() or not fraction):
        return number + "k"  # "1-2k": a range, kept as written
    fraction = fraction.ljust(3, "0")  # times 1000, in digits: exact at any length
    shifted, rest = (whole + fraction[:3]).lstrip("0") or "0", fraction[3:].rstrip("0")
    return f"{shifted}.{rest}" if rest else shifted


_UNITS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen "
    "fourteen fifteen sixteen seventeen eighteen nineteen"
)
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety"

NUMBER_WORDS: dict[str, dict[str, int]] = {
    "english": {
        **{word: n for n, word in enumerate(_UNITS.split())},
        **{word: 20 + 10 * n for n, word in enumerate(_TENS.split())},
        "dozen": 12,
        "hundred": 100,
        "thousand": 1000,
        "million": 1_000_000,
        "billion": 1_000_000_000,
    },
}
"""Number words by the `Language.name` of the store; a language not listed reads digits
only (its words would be misread as English ones)."""


def number_words(language: Language = ENGLISH) -> frozenset[str]:
    """The language's number words: values, like digits, and no subject's words."""
    return frozenset(NUMBER_WORDS.get(language.name, ()))


_NOT_A_COUNT = {
    "english": (
        re.compile(r"\b(?:no|the|this|that|which|each|every|any|some|only|other)\s+one\b", re.I),
        re.compile(r"\bone\s+(?:of|another|day|by|way|thing)\b", re.I),
    ),
}
"""Where a number word is no count ("no one", "one of them", "one day"): removed
before the words are read."""


@cache
def _number_word_re(language_name: str) -> re.Pattern[str] | None:
    words = NUMBER_WORDS.get(language_name)
    if not words:
        return None
    word = "|".join(sorted(words, key=len, reverse=True))
    # "and" joins only after a multiplier: "two hundred and five" is 205, "two and three" two
    scale = "|".join(f"(?<={w})" for w, n in words.items() if n >= 100)
    joint = rf"(?:[\s-]+|(?:{scale})\s+and\s+)"
    return re.compile(rf"\b(?:{word})(?:{joint}(?:{word}))*\b", re.IGNORECASE)


def _spelled_numbers(text: str, language_name: str) -> set[str]:
    pattern = _number_word_re(language_name)
    if pattern is None:
        return set()
    for idiom in _NOT_A_COUNT.get(language_name, ()):
        text = idiom.sub(" ", text)
    words = NUMBER_WORDS[language_name]
    return {str(_value(m.group(), words)) for m in pattern.finditer(text)}


def _value(spelled: str, words: dict[str, int]) -> int:
    """The value of a run of number words: "two hundred and five" -> 205,
    "twenty-five" -> 25, "a dozen" -> 12."""
    total = current = 0
    for word in re.findall(r"[^\W\d_]+", spelled.lower()):
        if word == "and":
            continue
        n = words[word]
        if n == 100:
            current = max(current, 1) * 100
        elif n >= 1000:
            total += max(current, 1) * n
            current = 0
        else:
            current += n
    return total + current


def date_words(text: str) -> frozenset[str]:
    found = {m.lower() for m in DATE_WORD_RE.findall(text)}
    if _MAY_RE.search(text):
        found.add("may")
    return frozenset(found)


def negations(text: str) -> tuple[str, ...]:
    """Sorted negation markers (a signature: "not" twice differs from once); "n't" counts
    as "not", so a contraction spelled out is a rewording, not a flipped negation."""
    spelled = (m.lower() for m in NEGATION_RE.findall(text))
    return tuple(sorted("not" if m in ("n't", "n\u2019t") else m for m in spelled))


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


def values_agree(a: str, b: str, language: Language = ENGLISH) -> bool:
    """True when numbers, date words, negations and names are the same in both texts."""
    return (
        numbers(a, language) == numbers(b, language)
        and date_words(a) == date_words(b)
        and negations(a) == negations(b)
        and names(a) == names(b)
    )


_CJK_MARKERS = ("现在", "目前", "不再", "改为", "改成", "换成", "变成", "搬到", "升级到", "已经不")
"""Markers in scripts no stemmer splits: every language's list ends with them."""


def _words(spelled: str) -> tuple[str, ...]:
    return tuple(spelled.split("|"))


CHANGE_MARKERS: dict[str, tuple[str, ...]] = {
    "english": _words(
        "now|nowadays|no longer|anymore|any more|moved to|moved from|switched|upgraded|"
        "downgraded|migrated|changed to|changed from|instead|used to|from now on|replaced"
    ),
    "german": _words(
        "jetzt|nun|inzwischen|nicht mehr|umgezogen|gewechselt|aktualisiert|stattdessen|früher"
    ),
    "french": _words("maintenant|désormais|ne plus|n'est plus|déménagé|passé à|au lieu"),
    "spanish": _words("ahora|ya no|se mudó|cambió a|en lugar de|actualizado"),
}
"""Words that say a state changed, by the `Language.name` of the store; a language
not listed uses the English ones."""


@cache
def _marker_re(language_name: str) -> re.Pattern[str]:
    words = CHANGE_MARKERS.get(language_name, CHANGE_MARKERS["english"])
    spelled = [r"\s+".join(map(re.escape, w.split())) for w in sorted(words, key=len, reverse=True)]
    cjk = "|".join(map(re.escape, _CJK_MARKERS))
    return re.compile(rf"(?<!\w)(?:{'|'.join(spelled)})(?!\w)|{cjk}", re.IGNORECASE)


def change_marker(text: str, language: Language = ENGLISH) -> str | None:
    """The first change marker in `text` (lower case, spaces single), or None."""
    found = _marker_re(language.name).search(text)
    return " ".join(found.group().lower().split()) if found else None


def state_change(old: str, new: str, language: Language = ENGLISH) -> str | None:
    """Why `new` says the state of `old` changed ("number", "date", "negation", "name",
    "marker:<words>"), or None when it only repeats, rewords or adds to it."""
    if not numbers(old, language) <= numbers(new, language):
        return "number"
    if not date_words(old) <= date_words(new):
        return "date"
    if negations(old) != negations(new):
        return "negation"
    if not names(old) <= names(new):
        return "name"
    marker = change_marker(new, language)
    if marker is not None and change_marker(old, language) != marker:
        return "marker:" + marker.replace(" ", "_")
    return None
