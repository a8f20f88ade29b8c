"""Stored token documents: the tokenizer's output kept beside a memory, so the
keyword leg never tokenises a stored memory again.

A document is the package tokenizer's primary tokens (stemmed, with
repeats, in order) then its CJK trigrams, joined by spaces. The SQLite
backend indexes it with FTS5 and builds its in-memory postings from it; the
PostgreSQL backend stores it in `content_doc` / `topic_doc`. Both rebuild a
`KeywordDoc` from it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence

from ._bm25 import KeywordDoc
from ._language import ENGLISH, Language
from ._text import cjk_trigrams, primary_tokens


def fts_document(text: str, language: Language = ENGLISH) -> str:
    """Primary tokens (with repeats, in order) then CJK trigrams, space separated;
    `language` is the service's (its stemmer and stopwords)."""
    return " ".join([*primary_tokens(text, language), *cjk_trigrams(text)])


def topics_document(topics: Sequence[str], language: Language = ENGLISH) -> str:
    return fts_document(" ".join(topics), language)


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
