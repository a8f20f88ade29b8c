"""Stored token documents (`service/documents.py`) score like the text they came from."""

from __future__ import annotations

import random

from langmem_trpc.service.bm25 import CorpusStats, KeywordDoc, QueryTerms, keyword_score
from langmem_trpc.service.documents import fts_document, keyword_doc, topics_document

TEXTS = [
    ("Production runs Go 1.23 on Kubernetes", ["ops", "go"]),
    ("Prefers tabs over spaces in Go code", ["style"]),
    ("東京の天気は晴れ、Go の勉強会に行った", ["travel", "東京"]),
    ("Deploys happen on Fridays after the go-live review", []),
    ("Cat named Go sleeps on the keyboard keyboard keyboard", ["pets", "go go"]),
]
QUERIES = ["go production", "keyboard go", "東京 天気", "fridays review go", "tabs spaces style"]


def _docs(terms: list[str] | None) -> list[KeywordDoc]:
    return [keyword_doc(fts_document(t), topics_document(tp), terms) for t, tp in TEXTS]


def test_stored_documents_score_like_the_texts():
    stats = CorpusStats.from_docs(KeywordDoc.build(t, tp) for t, tp in TEXTS)
    for query in QUERIES:
        terms = QueryTerms.build(query)
        built = [keyword_score(terms, KeywordDoc.build(t, tp), stats) for t, tp in TEXTS]
        stored = [keyword_score(terms, d, stats) for d in _docs(None)]
        assert stored == built, query


def test_a_document_kept_to_the_query_terms_scores_bit_for_bit_the_same():
    rng = random.Random(5)
    words = "go production keyboard tabs spaces style 東京 天気 fridays review cat".split()
    stats = CorpusStats.from_docs(KeywordDoc.build(t, tp) for t, tp in TEXTS)
    queries = QUERIES + [" ".join(rng.sample(words, rng.randint(1, 4))) for _ in range(50)]
    for query in queries:
        terms = QueryTerms.build(query)
        full = [keyword_score(terms, d, stats) for d in _docs(None)]
        kept = [keyword_score(terms, d, stats) for d in _docs(terms.tokens)]
        assert kept == full, query
    kept_doc = _docs(["keyboard", "absent"])[4]
    assert dict(kept_doc.content_tf) == {"keyboard": 3}
