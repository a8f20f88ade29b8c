"""Stored token documents: the tokenizer's output kept beside a memory, so the
keyword leg never tokenises a stored memory again.

A memory has two keyword fields: its text, and its keys (`memory_keys`: the
topics, then the participants and the location), so a name or a place the
extractor put in a field is found like a topic.

A document is the package tokenizer's primary tokens (stemmed, with
repeats, in order) then its CJK trigrams, joined by spaces. The SQLite
backend indexes it with FTS5 and builds its in-memory postings from it; the
PostgreSQL backend stores it in `content_doc` / `topic_doc`. Both rebuild a
`KeywordDoc` from it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence

from ..types import Memory
from .bm25 import KeywordDoc
from .language import ENGLISH, Language
from .text import cjk_trigrams, primary_tokens

__all__ = [
    "fts_document",
    "keys_of",
    "keyword_doc",
    "memory_keys",
    "topics_document",
]


def fts_document(text: str, language: Language = ENGLISH) -> str:
    """Primary tokens (with repeats, in order) then CJK trigrams, space separated;
    `language` is the service's (its stemmer and stopwords)."""
    if text.isascii():  # no CJK run, so no trigram
        return " ".join(primary_tokens(text, language))
    return " ".join([*primary_tokens(text, language), *cjk_trigrams(text)])


def topics_document(topics: Sequence[str], language: Language = ENGLISH) -> str:
    """The keys field's document of `memory_keys` (or of bare topics)."""
    return fts_document(" ".join(topics), language)


def memory_keys(
    topics: Sequence[str], participants: Sequence[str] = (), location: str | None = None
) -> list[str]:
    """A memory's keys field: its topics, then each participant and the location not
    already among them (case-insensitive). The keys field is BM25F's second field
    (`_bm25.TOPIC_WEIGHT`); a name given both as a topic and a participant (what
    `VerbatimExtractor`'s context topics do for the speaker) counts once."""
    keys = list(topics)
    seen = {k.casefold() for k in keys}
    for extra in (*participants, *([location] if location else [])):
        if extra.casefold() not in seen:
            seen.add(extra.casefold())
            keys.append(extra)
    return keys


def keys_of(memory: Memory) -> list[str]:
    """`memory_keys` of a memory's topics, participants and location."""
    return memory_keys(memory.topics, memory.participants, memory.location)


def keyword_doc(
    content_document: str, topic_document: str, terms: Collection[str] | None = None
) -> KeywordDoc:
    """The `KeywordDoc` of stored documents, equal in scoring to `KeywordDoc.build`.

    Trigrams (three CJK characters) never equal primary tokens (two), so one count
    serves both. The phrase-fallback fields stay empty: a FTS candidate matched a
    token. `terms` (a query's tokens) keeps only theirs: scoring reads nothing else.
    """
    content = content_document.split()
    topics = topic_document.split()
    if terms is None:
        content_tf: Mapping[str, int] = Counter(content)
        topic_tf: Mapping[str, int] = Counter(topics)
    else:
        content_tf = {t: n for t in terms if (n := content.count(t))}
        topic_tf = {t: n for t in terms if (n := topics.count(t))}
    return KeywordDoc(
        content_tf=content_tf,
        content_len=len(content),
        topic_tf=topic_tf,
        topic_len=len(topics),
        content_norm="",
        topic_norm="",
    )
