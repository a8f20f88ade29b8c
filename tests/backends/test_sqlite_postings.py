"""The SQLite keyword leg's in-memory postings (`backends/sqlite/_postings.py`)."""

from __future__ import annotations

import itertools
import random
import sqlite3
import time
from datetime import datetime, timedelta, timezone

import pytest

from langmem_trpc import InMemoryMemoryService, Limits, SearchOptions, UserKey
from langmem_trpc.backends.sqlite import SQLiteMemoryService
from langmem_trpc.backends.sqlite._postings import KeywordIndex
from langmem_trpc.service.bm25 import CorpusStats, KeywordDoc, QueryTerms, keyword_score
from langmem_trpc.testing import HashingEmbeddings
from langmem_trpc.testing.conformance import MemoryServiceConformance

ALICE = UserKey(app_name="app", user_id="alice")
BOB = UserKey(app_name="app", user_id="bob")
T0 = datetime(2024, 5, 1, tzinfo=timezone.utc)
WORDS = "alpha beta gamma what did you the dark mode 北京大学 咖啡店 C# x1 β go".split()


def indexed(svc: SQLiteMemoryService) -> SQLiteMemoryService:
    """The service with its keyword index built on every state's first search."""
    svc._caches.keywords.fts_searches = 0
    svc._caches.keywords.background = False
    return svc


class TestSQLiteIndexedKeywordConformance(MemoryServiceConformance):
    """Every conformance search runs on the postings, not FTS5."""

    @pytest.fixture
    def service(self, tmp_path):
        return indexed(SQLiteMemoryService(tmp_path / "m.db"))

    @pytest.fixture
    def service_url(self, tmp_path):
        return f"sqlite://{tmp_path / 'm.db'}"

    @pytest.fixture
    def make_service(self, tmp_path):
        files = itertools.count()  # a fresh file each call, as `service` is
        return lambda limits: indexed(
            SQLiteMemoryService(tmp_path / f"limited{next(files)}.db", limits=limits)
        )


class TestSQLiteIndexedHybridConformance(MemoryServiceConformance):
    @pytest.fixture
    def service(self, tmp_path):
        return indexed(SQLiteMemoryService(tmp_path / "m.db", HashingEmbeddings()))

    @pytest.fixture
    def service_url(self, tmp_path):
        return f"sqlite://{tmp_path / 'm.db'}"

    @pytest.fixture
    def make_service(self, tmp_path):
        files = itertools.count()
        return lambda limits: indexed(
            SQLiteMemoryService(
                tmp_path / f"limited{next(files)}.db", HashingEmbeddings(), limits=limits
            )
        )


def _index_of(svc: SQLiteMemoryService, user: UserKey) -> KeywordIndex:
    conn = sqlite3.connect(svc.path)
    try:
        state = conn.execute(
            "SELECT generation, version FROM user_state WHERE app_name = ? AND user_id = ?",
            (user.app_name, user.user_id),
        ).fetchone()
        return KeywordIndex.load(conn, user, (state[0], state[1]))
    finally:
        conn.close()


def test_scores_equal_the_shared_scorer_bit_for_bit(tmp_path):
    rng = random.Random(5)
    for trial in range(25):
        svc = SQLiteMemoryService(tmp_path / f"{trial}.db", limits=Limits(capacity=None))
        texts = list(
            dict.fromkeys(
                " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))
                for _ in range(rng.randint(1, 40))
            )
        )
        topics = [[rng.choice(WORDS) for _ in range(rng.randint(0, 3))] for _ in texts]
        for text, tp in zip(texts, topics, strict=True):
            svc.add(ALICE, text, topics=tp)
        svc.add(BOB, "alpha beta gamma from another user")
        index = _index_of(svc, ALICE)
        docs = {e.text: KeywordDoc.build(e.text, e.memory.topics) for e in svc.read(ALICE)}
        stats = CorpusStats.from_docs(docs.values())
        for _ in range(8):
            terms = QueryTerms.build(" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 5))))
            assert index.stats(terms.tokens) == CorpusStats(
                n_docs=stats.n_docs,
                df={t: stats.df.get(t, 0) for t in terms.tokens},
                avg_content_len=stats.avg_content_len,
                avg_topic_len=stats.avg_topic_len,
            )
            scored = index.score(terms, index.stats(terms.tokens))
            by_rid = {e_rid: text for e_rid, text in _rids_and_texts(svc, ALICE)}
            matched = {by_rid[int(index.rids[r])] for r in scored.rows}
            for text, doc in docs.items():
                want = keyword_score(terms, doc, stats)
                if text not in matched:
                    assert not doc.terms & set(terms.tokens)
                    continue
                i = [by_rid[int(index.rids[r])] for r in scored.rows].index(text)
                assert float(scored.scores[i]) == want
        svc.close()


def _rids_and_texts(svc: SQLiteMemoryService, user: UserKey) -> list[tuple[int, str]]:
    conn = sqlite3.connect(svc.path)
    try:
        return conn.execute(
            "SELECT rid, text FROM memories WHERE app_name = ? AND user_id = ?"
            " AND deleted_at IS NULL",
            (user.app_name, user.user_id),
        ).fetchall()
    finally:
        conn.close()


def test_indexed_search_ranks_exactly_like_the_reference(tmp_path):
    # 400 memories sharing common words: more matches than the FTS5 path's 150
    # BM25 candidates; the postings score every one of them.
    rng = random.Random(3)
    words = "tea coffee go rust python hiking alps paris lyon cat dog jazz".split()
    reference = InMemoryMemoryService(limits=Limits(capacity=None))
    svc = SQLiteMemoryService(tmp_path / "m.db", limits=Limits(capacity=None))
    svc._caches.keywords.background = False
    for i in range(400):
        # Many short one-word-heavy rows (BM25 likes them) and long rows holding
        # several query words (the composite's coverage likes them).
        if i % 3:
            text = " ".join([rng.choice(words)] * rng.randint(2, 4)) + f" n{i}"
        else:
            text = " ".join(rng.choice(words) for _ in range(rng.randint(12, 30))) + f" n{i}"
        kind = rng.choice(["fact", "episode"])
        event = T0 + timedelta(days=rng.randint(0, 30)) if kind == "episode" else None
        reference.add(ALICE, text, kind=kind, event_time=event)
        svc.add(ALICE, text, kind=kind, event_time=event)
    options = [
        SearchOptions(max_results=100),
        SearchOptions(kind="episode", kind_fallback=False, max_results=30),
        SearchOptions(time_before=T0 + timedelta(days=9), max_results=30),
    ]
    for query in ["tea coffee", "go rust python", "hiking in the alps with a dog", "jazz"]:
        for opt in options:
            want = [(e.text, e.score) for e in reference.search(ALICE, query, opt)]
            svc.search(ALICE, query, opt)  # the state's first search may run on FTS5
            got = [(e.text, e.score) for e in svc.search(ALICE, query, opt)]
            assert ALICE in svc._caches.keywords._items
            assert got == want, (query, opt)
    svc.close()


def test_index_is_built_on_a_state_second_search_and_dropped_by_a_write(tmp_path):
    svc = SQLiteMemoryService(tmp_path / "m.db")
    svc.add(ALICE, "dark mode everywhere")
    cache = svc._caches.keywords
    cache.background = False
    svc.search(ALICE, "dark mode")
    assert ALICE not in cache._items  # a write then one search (reconcile) builds nothing
    svc.search(ALICE, "dark mode")
    built = cache._items[ALICE]
    svc.search(ALICE, "mode")
    assert cache._items[ALICE] is built
    svc.add(ALICE, "light mode at night")
    assert [e.text for e in svc.search(ALICE, "light mode")][0] == "light mode at night"
    assert cache._items[ALICE] is built  # stale, unused: the new state searched FTS5 once
    assert [e.text for e in svc.search(ALICE, "light mode")][0] == "light mode at night"
    assert cache._items[ALICE] is not built
    svc.close()


def test_background_build_never_blocks_a_search_and_is_used_once_ready(tmp_path):
    svc = SQLiteMemoryService(tmp_path / "m.db", limits=Limits(capacity=None))
    svc.add_many(ALICE, [f"note {i} about tea and coffee" for i in range(300)])
    cache = svc._caches.keywords
    first = [(e.id, e.score) for e in svc.search(ALICE, "tea coffee")]
    assert [(e.id, e.score) for e in svc.search(ALICE, "tea coffee")] == first
    deadline = time.monotonic() + 10
    while ALICE not in cache._items and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ALICE in cache._items
    assert [(e.id, e.score) for e in svc.search(ALICE, "tea coffee")] == first
    svc.close()


def test_index_sees_writes_of_another_process_or_instance(tmp_path):
    path = tmp_path / "m.db"
    reader = indexed(SQLiteMemoryService(path))
    writer = SQLiteMemoryService(path)
    writer.add(ALICE, "dark mode everywhere")
    assert [e.text for e in reader.search(ALICE, "mode")] == ["dark mode everywhere"]
    writer.add(ALICE, "light mode at night")
    writer.delete(ALICE, reader.search(ALICE, "dark")[0].id)
    assert [e.text for e in reader.search(ALICE, "mode")] == ["light mode at night"]
    assert reader.search(BOB, "mode") == []
    reader.close()
    writer.close()


def test_empty_and_tokenless_users_search_nothing(tmp_path):
    svc = indexed(SQLiteMemoryService(tmp_path / "m.db"))
    assert svc.search(ALICE, "anything") == []
    svc.add(ALICE, "C# and F#")
    assert [e.text for e in svc.search(ALICE, "C#")] == ["C# and F#"]
    assert svc.search(ALICE, "zzz") == []
    svc.close()
