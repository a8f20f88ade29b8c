"""Tokenising shared by keyword search, Jaccard, dedupe and reconcile: one tokeniser for
every backend keeps scores comparable (SQLite FTS, the in-memory scorer, reconcile).

Latin text: maximal runs of letters/digits, lowercased, length >= 2, minus the language's
stopwords, Snowball-stemmed ("Hiked" -> "hike"; `service.language`), cut to
`MAX_TOKEN_CHARS` (PostgreSQL refuses long tsvector lexemes; the stored text stays
exact). CJK text (no dictionary, so no jieba): each run of Han/Kana/Hangul yields its
2-character windows as primary tokens and its 3-character windows as "trigrams".

Part of the public backend kit: a backend that scores keywords itself tokenises with
`primary_tokens` (and `cjk_trigrams`) so its scores match the others'.
"""

from __future__ import annotations

import re
import unicodedata
from itertools import groupby

from .language import ENGLISH, MAX_TOKEN_CHARS, Language

__all__ = [
    "CJK_STOPWORDS",
    "cjk_trigrams",
    "jaccard",
    "normalize_text",
    "primary_tokens",
    "search_tokens",
    "token_jaccard",
    "token_set",
]

CJK_STOPWORDS = frozenset(
    "的 了 是 在 和 有 我 他 她 它 这 那 都 也 就 不 会 到 说 对 一个 一些 一种 这个 那个 我们 你们 他们 她们 它们 "
    "自己 已经 还是 如果 因为 所以 然后 用户".split()
)

_CJK_RANGES = (
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3400, 0x4DBF),  # CJK Extension A
    (0x4E00, 0x9FFF),  # CJK Unified Ideographs
    (0xAC00, 0xD7AF),  # Hangul syllables
    (0xF900, 0xFAFF),  # CJK compatibility
    (0x20000, 0x2FFFF),
)
_ASCII_RUN = re.compile(r"[A-Za-z0-9]+")
_ASCII_WORDS = bytes(
    c + 32 if 65 <= c <= 90 else c if 48 <= c <= 57 or 97 <= c <= 122 else 32 for c in range(256)
)
"""Byte table: ASCII letters lowercased, digits kept, every other byte a space. An ASCII
text translated with it and split holds the `_ASCII_RUN` runs of the lowered text
(twice as fast as the regex, once per stored or searched text)."""


def _ascii_words(text: str) -> list[str]:
    """The lowercased `_ASCII_RUN` runs of an ASCII text."""
    return text.encode("ascii").translate(_ASCII_WORDS).decode("ascii").split()


def _char_class(char: str) -> tuple[bool, bool]:
    """Whether `char` is a word character, and whether it is CJK."""
    code = ord(char)
    cjk = code >= _CJK_RANGES[0][0] and any(lo <= code <= hi for lo, hi in _CJK_RANGES)
    return cjk or char.isalnum() or unicodedata.category(char) == "Mn", cjk


def _runs(text: str) -> list[tuple[str, bool]]:
    """Split into maximal runs of word characters, flagged CJK or not."""
    if text.isascii():  # same result, ~20x faster: ASCII word chars are exactly [A-Za-z0-9]
        return [(run, False) for run in _ASCII_RUN.findall(text)]
    return [("".join(run), cjk) for (word, cjk), run in groupby(text, _char_class) if word]


def _cjk_stop(token: str) -> bool:
    return token in CJK_STOPWORDS or all(c in CJK_STOPWORDS for c in token)


def primary_tokens(text: str, language: Language = ENGLISH, stem: bool = True) -> list[str]:
    """Tokens in order, with repeats (term frequencies need them); Latin words stemmed
    unless `stem` is false (words shown to people, such as context topics)."""
    if text.isascii():  # same tokens, several times faster: no CJK, cached terms
        if stem:
            return language.terms(_ascii_words(text))
        stop = language.stopwords
        words = [r for r in _ascii_words(text) if len(r) >= 2 and r not in stop]
        return [w[:MAX_TOKEN_CHARS] for w in words]
    tokens: list[str] = []
    runs = _runs(text.lower())
    single_cjk = len(runs) == 1 and runs[0][1] and len(runs[0][0]) == 1
    for run, cjk in runs:
        if not cjk:
            if stem:
                tokens.extend(language.terms([run]))
            elif len(run) >= 2 and run not in language.stopwords:
                tokens.append(run[:MAX_TOKEN_CHARS])
        elif len(run) == 1:
            if single_cjk:
                tokens.append(run)
        else:
            grams = (run[i : i + 2] for i in range(len(run) - 1))
            tokens.extend(gram for gram in grams if not _cjk_stop(gram))
    return tokens


def search_tokens(text: str, language: Language = ENGLISH) -> list[str]:
    """Primary tokens, de-duplicated, first occurrence order."""
    return list(dict.fromkeys(primary_tokens(text, language)))


def cjk_trigrams(text: str) -> list[str]:
    """Every 3-character window of each CJK run of length >= 3 (secondary tokens)."""
    if text.isascii():  # no CJK run: skip the split (called for every stored field)
        return []
    grams: list[str] = []
    for run, cjk in _runs(text.lower()):
        if cjk and len(run) >= 3:
            grams.extend(
                run[i : i + 3] for i in range(len(run) - 2) if not _cjk_stop(run[i : i + 3])
            )
    return list(dict.fromkeys(grams))


def token_set(text: str, language: Language = ENGLISH) -> frozenset[str]:
    """Primary tokens plus CJK trigrams: the set Jaccard and dedupe compare."""
    return frozenset(search_tokens(text, language)) | frozenset(cjk_trigrams(text))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def token_jaccard(a: str, b: str, language: Language = ENGLISH) -> float:
    """|A∩B| / |A∪B| over `token_set`s; 0 when either side has no tokens."""
    return jaccard(token_set(a, language), token_set(b, language))


def normalize_text(text: str) -> str:
    """The form used for content fingerprints: NFKC, casefolded, single spaces, no trailing punctuation."""
    text = unicodedata.normalize("NFKC", text)
    # str.split() splits on exactly the characters `\s` matches (U+001F included), and
    # drops leading and trailing ones: the old `\s+` substitution and strip, 3x faster.
    return " ".join(text.split()).casefold().rstrip(".!?。！？ ")
