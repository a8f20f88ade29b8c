"""Per-language word lists and stemming of the shared tokenizer.

A `Language` holds everything language-specific that search reads: the Snowball
stemmer (PyStemmer), stopwords, the question words a keyword query weighs lightly,
and the time cues (month names, time words, a "when" question). Only `ENGLISH` has
cue lists; `language("german")` stems German and its cue steps never fire. Stored
tokens depend on the language, so every service takes one (`resolve_language`) and
the database backends refuse a database written under another
(docs/configuration.md, "The services' `language=`").
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from functools import cached_property
from typing import cast

import Stemmer

from ..errors import ConfigurationError

__all__ = [
    "CACHED_WORD_CHARS",
    "ENGLISH",
    "MAX_TOKEN_CHARS",
    "TERM_CACHE_WORDS",
    "Language",
    "language",
    "resolve_language",
]

MAX_TOKEN_CHARS = 256
"""Longest token, in characters (at most 4 UTF-8 bytes each, so 1,024 bytes, under
PostgreSQL's 2,046-byte lexeme limit). A longer run (a pasted base64 blob, a hash)
is cut to its first 256 characters on every backend, for documents and queries alike."""

TERM_CACHE_WORDS = 65_536
"""Words a `Language` remembers the term of (`Language.terms`); a full cache is
emptied and refilled, so its size stays bounded in a long-lived process."""

CACHED_WORD_CHARS = 48
"""Longest word remembered: with `TERM_CACHE_WORDS` it bounds the cache near 10 MB
(a pasted blob is stemmed each time instead)."""

_ENGLISH_MONTHS = (
    "january february march april may june july august september october november december"
).split()


@dataclass(frozen=True, eq=False)
class Language:
    """One language of the tokenizer: a Snowball algorithm plus its word lists."""

    name: str
    """A Snowball algorithm name (`Stemmer.algorithms()`), e.g. "english"."""
    stopwords: frozenset[str] = frozenset()
    question_words: frozenset[str] = frozenset()
    """Question words, auxiliaries and pronouns (matched before stemming)."""
    month_names: tuple[str, ...] = ()
    """The twelve month names, January first; empty: no calendar dates are read."""
    time_words: frozenset[str] = frozenset()
    """Words that date a statement ("yesterday", "last", "Sunday"), months included."""
    when_question: re.Pattern[str] | None = None
    """Matches a question that asks when."""
    person_word: str = ""
    """The word that stands for a person a query names, possessive or not, in the query
    the vector leg embeds ("they"; empty: the name is dropped): `first_tier.masked_query`."""
    possessive: str = ""
    """A regular expression of the possessive ending masked with a name (English "'s")."""
    _local: threading.local = field(default_factory=threading.local, repr=False)
    """One stemmer per thread: a PyStemmer object must not be shared across threads."""
    _terms: dict[str, str] = field(default_factory=dict, repr=False)
    """word -> its term ("" for a dropped word), at most `TERM_CACHE_WORDS` entries.
    A plain dict: each get and set is atomic, so threads share it without a lock."""

    def _stemmer(self) -> Stemmer.Stemmer:
        stemmer = getattr(self._local, "stemmer", None)
        if stemmer is None:
            # No PyStemmer cache: its hit took longer than stemming (0.6 against 0.3 us),
            # and a miss three times as long; `terms` keeps its own.
            stemmer = self._local.stemmer = Stemmer.Stemmer(self.name, 0)
        return stemmer

    def stem(self, word: str) -> str:
        return cast(str, self._stemmer().stemWord(word))

    def stem_words(self, words: list[str]) -> list[str]:
        """`stem` of each word, in one call into the stemmer."""
        return cast(list[str], self._stemmer().stemWords(words))

    def terms(self, words: list[str]) -> list[str]:
        """The index terms of lowercased words, in order: words shorter than two
        characters and stopwords dropped, the rest stemmed and cut to
        `MAX_TOKEN_CHARS`. Remembered per word: stemming was most of the cost of
        tokenising a memory, and a user's words repeat."""
        found = list(map(self._terms.get, words))
        if None in found:
            found = [self._learn(w) if t is None else t for w, t in zip(words, found, strict=True)]
        return [t for t in found if t]

    def _learn(self, word: str) -> str:
        term = "" if len(word) < 2 or word in self.stopwords else self.stem(word)
        term = term[:MAX_TOKEN_CHARS]
        if len(word) <= CACHED_WORD_CHARS:
            if len(self._terms) >= TERM_CACHE_WORDS:
                self._terms.clear()
            self._terms[word] = term
        return term

    @cached_property
    def stemmed_question_words(self) -> frozenset[str]:
        return frozenset(self.stem(w) for w in self.question_words)


ENGLISH = Language(
    name="english",
    stopwords=frozenset(
        "a an the and or of in on to for with is are am be been being was were this that these "
        "those".split()
    ),
    question_words=frozenset(
        "what when where who whom whose why how which did does do doing done has have had would "
        "could should can will is are be been her his him he she they them their you your me my "
        "we our it its about any some kind sort type".split()
    ),
    month_names=tuple(_ENGLISH_MONTHS),
    time_words=frozenset(
        (
            "yesterday today tonight tomorrow last next ago recently earlier week weekend weeks "
            "month months year years days summer winter spring fall autumn monday tuesday "
            "wednesday thursday friday saturday sunday"
        ).split()
    ).union(_ENGLISH_MONTHS),
    when_question=re.compile(
        r"^\s*(?:when|what (?:date|year|month|day|time)|which (?:year|month|day))\b"
        r"|\bhow long ago\b",
        re.I,
    ),
    person_word="they",
    possessive=r"['\u2019]s?",
)

_LANGUAGES: dict[str, Language] = {"english": ENGLISH}
_LOCK = threading.Lock()


def language(name: str) -> Language:
    """The `Language` of a Snowball algorithm name; word lists are filled for English only.

    Raises `ConfigurationError` naming the unknown algorithm.
    """
    key = name.strip().lower()
    with _LOCK:
        found = _LANGUAGES.get(key)
        if found is None:
            if key not in Stemmer.algorithms():
                raise ConfigurationError(
                    f"language: unknown Snowball algorithm {name!r}; "
                    f"one of {', '.join(Stemmer.algorithms())}"
                )
            found = _LANGUAGES[key] = Language(name=key)
    return found


def resolve_language(value: str | Language) -> Language:
    """A service's `language` option: a `Language` as given, a name through `language`.

    Raises `ConfigurationError` naming the field for an unknown name or another type.
    """
    if isinstance(value, Language):
        return value
    if not isinstance(value, str):
        raise ConfigurationError(
            f"language: expected a Snowball language name or a Language, got {type(value).__name__}"
        )
    return language(value)
