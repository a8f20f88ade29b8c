"""One keyword scorer: every backend ranks a keyword-only search the same way.

The same memories (stemmable English, CJK, topics, participants, locations) go into the in-memory
reference, SQLite on its FTS5 path, SQLite on its postings and PostgreSQL;
the same queries must return the same memories with the same scores (ties,
broken by ids and times that differ between stores, compared as sets).
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from langmem_trpc import InMemoryMemoryService, Limits, SearchOptions, UserKey
from langmem_trpc.backends.sqlite import SQLiteMemoryService
from langmem_trpc.service.protocol import MemoryService

ALICE = UserKey("app", "alice")
WORDS = (
    "hike hiked hiking hikes trail trails paint painted painting camp camping camped "
    "dog dogs adopt adopted research researched pottery class classes go version "
    "北京大学 咖啡店 喜欢绿茶 tea coffee what did you when"
).split()
QUERIES = [
    "hiking trails",
    "When did she adopt the dogs?",
    "painted pottery classes",
    "go version",
    "北京 咖啡",
    "what did you research",
    "camped",
    "hiking with Bob in Chamonix",
    "Caroline painted in Paris",
]
PEOPLE = ["Bob", "Caroline", "Jon"]
PLACES = ["Chamonix", "Paris", None, None]
Corpus = list[tuple[str, list[str], list[str], str | None]]


def _corpus(seed: int) -> Corpus:
    rng = random.Random(seed)
    texts = list(
        dict.fromkeys(
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 10))) for _ in range(80)
        )
    )
    return [
        (
            t,
            [rng.choice(WORDS) for _ in range(rng.randint(0, 2))],
            rng.sample(PEOPLE, rng.randint(0, 2)),
            rng.choice(PLACES),
        )
        for t in texts
    ]


def _ranking(svc: MemoryService, query: str) -> list[tuple[float, str]]:
    hits = svc.search(ALICE, query, SearchOptions(max_results=1000, hybrid=False))
    return sorted((round(h.score or 0.0, 12), h.text) for h in hits)


def _fill(svc: MemoryService, corpus: Corpus) -> MemoryService:
    for text, topics, people, place in corpus:
        svc.add(ALICE, text, topics=topics, participants=people, location=place)
    return svc


def _postings(svc: SQLiteMemoryService) -> SQLiteMemoryService:
    svc._caches.keywords.fts_searches = 0
    svc._caches.keywords.background = False
    return svc


def _check(make: Callable[[], MemoryService]) -> None:
    for seed in range(3):
        corpus = _corpus(seed)
        reference = _fill(InMemoryMemoryService(limits=Limits(capacity=None)), corpus)
        other = _fill(make(), corpus)
        try:
            for query in QUERIES:
                want = _ranking(reference, query)
                assert want, query
                assert _ranking(other, query) == want, query
        finally:
            other.close()


def test_sqlite_fts_path_ranks_like_the_reference(tmp_path):
    paths = iter(range(100))
    _check(
        lambda: SQLiteMemoryService(tmp_path / f"{next(paths)}.db", limits=Limits(capacity=None))
    )


def test_sqlite_postings_rank_like_the_reference(tmp_path):
    paths = iter(range(100))
    _check(
        lambda: _postings(
            SQLiteMemoryService(tmp_path / f"{next(paths)}.db", limits=Limits(capacity=None))
        )
    )


@pytest.mark.postgres
def test_postgres_ranks_like_the_reference(pg_url):
    from langmem_trpc.backends.postgres import PostgresMemoryService

    def make() -> MemoryService:
        svc = PostgresMemoryService(pg_url, limits=Limits(capacity=None))
        svc.setup()
        svc.clear(ALICE)  # the previous corpus
        return svc

    _check(make)


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_a_name_in_the_text_outranks_the_same_name_in_participants(tmp_path, backend):
    """BM25F: participants and location are the keys field, weighted below the text
    (`TOPIC_WEIGHT`); both memories are found, the one saying the name first."""
    svc: MemoryService = InMemoryMemoryService()
    if backend == "sqlite":
        svc = SQLiteMemoryService(tmp_path / "m.db")
    svc.add(ALICE, "Went climbing", participants=["Bob"], location="Chamonix")
    svc.add(ALICE, "Bob went climbing")
    svc.add(ALICE, "Went climbing in Chamonix")
    assert [h.text for h in svc.search(ALICE, "Bob")] == ["Bob went climbing", "Went climbing"]
    hits = svc.search(ALICE, "Chamonix")
    assert [h.text for h in hits] == ["Went climbing in Chamonix", "Went climbing"]
    assert hits[0].score is not None and hits[1].score is not None
    assert hits[0].score > hits[1].score > 0
    svc.close()
