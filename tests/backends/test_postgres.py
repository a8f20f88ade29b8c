"""PostgresMemoryService against a real PostgreSQL 18 + pgvector 0.8 (embedded server or LANGMEM_TRPC_PG_URL)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading

import psycopg
import pytest

from langmem_trpc import (
    ConfigurationError,
    Kind,
    Limits,
    PostgresMemoryService,
    SearchOptions,
    UserKey,
)
from langmem_trpc.backends.postgres import _migrations, _search_sql, _sql
from langmem_trpc.service.language import ENGLISH
from langmem_trpc.service.search import rrf_fuse
from langmem_trpc.testing import HashingEmbeddings
from langmem_trpc.testing.conformance import MemoryServiceConformance
from langmem_trpc.types import FusionSettings, Memory

T_EVENT = "2024-05-06T18:30:00+02:00"

pytestmark = pytest.mark.postgres

ALICE = UserKey("app", "alice")
BOB = UserKey("app", "bob")
TABLES = (
    "langmem_memories, langmem_history, langmem_cursors, langmem_user_stats, langmem_user_terms,"
    " langmem_thread_claims, langmem_dead_letters"
)


@pytest.fixture(scope="module")
def schema_url(pg_module_url):
    svc = PostgresMemoryService(pg_module_url, HashingEmbeddings())
    svc.setup()
    svc.close()
    return pg_module_url


@pytest.fixture
def clean_url(schema_url):
    with psycopg.connect(schema_url, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {TABLES}")
    return schema_url


@pytest.fixture
async def opened(clean_url):
    """Services made by a test, closed inside the test's event loop.

    An AsyncConnectionPool must be closed before its loop is: the loop
    fixture may be torn down before the conformance `client` fixture runs
    its sync `close()`.
    """
    made: list[PostgresMemoryService] = []

    def make(**kwargs) -> PostgresMemoryService:
        service = PostgresMemoryService(clean_url, **kwargs)
        made.append(service)
        return service

    yield make
    for service in made:
        await service.aclose()


class TestPostgresWithEmbeddings(MemoryServiceConformance):
    @pytest.fixture
    def service(self, opened):
        return opened(embeddings=HashingEmbeddings())

    @pytest.fixture
    def service_url(self, clean_url):
        return clean_url

    @pytest.fixture
    def make_service(self, opened):
        return lambda limits: opened(embeddings=HashingEmbeddings(), limits=limits)


class TestPostgresKeywordOnly(MemoryServiceConformance):
    @pytest.fixture
    def service(self, opened):
        return opened()

    @pytest.fixture
    def service_url(self, clean_url):
        return clean_url

    @pytest.fixture
    def make_service(self, opened):
        return lambda limits: opened(limits=limits)


@pytest.fixture
def svc(opened):
    return opened(embeddings=HashingEmbeddings())


def test_concurrent_adds_of_the_same_text_make_one_row(svc, clean_url):
    barrier = threading.Barrier(8)
    ids: list[str] = []

    def writer() -> None:
        barrier.wait()
        ids.append(svc.add(ALICE, "Allergic to peanuts").id)

    threads = [threading.Thread(target=writer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == 1
    with psycopg.connect(clean_url) as conn:
        rows = conn.execute(
            "SELECT count(*) FROM langmem_memories WHERE text = 'Allergic to peanuts'"
        ).fetchone()
    assert rows == (1,)


async def test_concurrent_async_adds_of_the_same_text_make_one_row(svc):
    entries = await asyncio.gather(*(svc.aadd(ALICE, "Owns a red bicycle") for _ in range(8)))
    assert len({e.id for e in entries}) == 1
    assert await svc.acount(ALICE) == 1


def test_sql_rrf_fusion_equals_python_rrf(svc):
    texts = [
        "Production runs Go 1.23 on Kubernetes",
        "Go modules are vendored in production",
        "Kubernetes cluster upgraded last week",
        "Prefers tabs over spaces",
        "Runs the production database on PostgreSQL",
        "Enjoys hiking and Go board games",
        "Production deploys happen on Fridays",
        "Has two cats named Go and Stop",
    ]
    for text in texts:
        svc.add(ALICE, text)
    for query, k in [
        ("Go in production", 60),
        ("kubernetes upgrade", 10),
        ("database production", 1),
    ]:
        options = SearchOptions(query=query, hybrid=True, rrf_k=k)
        q = _search_sql.build_search(
            ALICE, options, None, 30, HashingEmbeddings().embed_query(query), 10_000
        )
        with (
            psycopg.connect(svc._conninfo) as conn,
            conn.cursor(row_factory=psycopg.rows.dict_row) as cur,
        ):
            rows = cur.execute(q.sql, q.params).fetchall()
        vector = [
            r["id"] for r in sorted((r for r in rows if r["vrank"]), key=lambda r: r["vrank"])
        ]
        keyword = [
            r["id"] for r in sorted((r for r in rows if r["krank"]), key=lambda r: r["krank"])
        ]
        assert vector and keyword
        python = rrf_fuse([vector, keyword], k)
        sql = {r["id"]: r["rrf"] for r in rows}
        assert sql.keys() == python.keys()
        for key, value in python.items():
            assert sql[key] == pytest.approx(value, rel=1e-12)
        assert [r["id"] for r in rows] == sorted(python, key=lambda i: (-python[i], *_tie(rows, i)))


def _tie(rows, memory_id):
    row = next(r for r in rows if r["id"] == memory_id)
    return (-row["updated_at"].timestamp(), row["id"])


def test_hybrid_scores_are_absolute_not_ts_rank(svc):
    svc.add(ALICE, "Production runs Go 1.23")
    svc.add(ALICE, "Prefers tabs over spaces")
    hit = svc.search(ALICE, "production Go", SearchOptions(hybrid=True))[0]
    assert hit.text == "Production runs Go 1.23"
    assert 0.3 < hit.score <= 1.0
    assert hit.rrf_score == pytest.approx(0.75 / 61 + 1 / 61)  # the vector leg weighs 0.75


STORED_DOC_TEXTS = [
    ("Production runs Go 1.23 on Kubernetes", ["ops", "go"]),
    ("Go modules are vendored in production production", []),
    ("東京の天気は晴れ、東京タワーに行った", ["旅行", "東京"]),
    ("Likes C# and F# for the backend", ["languages"]),
    ("Kubernetes cluster upgraded; Go services restarted", ["ops"]),
]


def _scored(svc, query):
    return [(e.id, e.score) for e in svc.search(ALICE, query, SearchOptions(max_results=10))]


@pytest.mark.parametrize("embeddings", [None, HashingEmbeddings()], ids=["keyword", "hybrid"])
def test_stored_keyword_docs_score_like_tokenising_again(opened, clean_url, embeddings):
    """Keyword candidates are scored from the stored content_doc/topic_doc, with the same
    scores as tokenising the text again (what rows without stored docs still do)."""
    svc = opened(embeddings=embeddings)
    for text, topics in STORED_DOC_TEXTS:
        svc.add(ALICE, text, topics=topics)
    svc.add(ALICE, "Production runs Go 1.23 on Kubernetes", topics=["platform"])  # topic refresh
    queries = ["go production", "東京 天気", "kubernetes ops", "C#", "platform go"]
    stored = [_scored(svc, q) for q in queries]
    assert all(stored[:4])
    with psycopg.connect(clean_url, autocommit=True) as conn:
        assert conn.execute(
            "SELECT count(*) FROM langmem_memories WHERE content_doc IS NULL OR topic_doc IS NULL"
        ).fetchone() == (0,)
        conn.execute("UPDATE langmem_memories SET content_doc = NULL, topic_doc = NULL")
    assert [_scored(svc, q) for q in queries] == stored


def test_docs_migration_backfills_rows_written_before_it(opened, clean_url):
    svc = opened(embeddings=HashingEmbeddings(), limits=Limits(capacity=None))
    for text, topics in STORED_DOC_TEXTS:
        svc.add(ALICE, text, topics=topics)
    svc.add_many(BOB, [Memory(text=f"bulk note {i}") for i in range(2_500)])
    with psycopg.connect(clean_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE langmem_memories DROP COLUMN content_doc, DROP COLUMN topic_doc")
        conn.execute(
            "DELETE FROM langmem_migrations WHERE scope = 'core' AND version = %s",
            (_sql.DOCS_MIGRATION,),
        )
    svc.setup()
    with psycopg.connect(clean_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT text, topics, content_doc, topic_doc FROM langmem_memories"
        ).fetchall()
    assert len(rows) == len(STORED_DOC_TEXTS) + 2_500
    for text, topics, content_doc, topic_doc in rows:
        expected = _sql.keyword_columns(text, topics, ENGLISH)
        assert (content_doc, topic_doc) == (expected["content_doc"], expected["topic_doc"])


def test_stemmed_docs_migration_retokenises_every_row(opened, clean_url):
    """Rows stored by the unstemmed tokenizer get stemmed documents, terms and lengths,
    and their user's document frequencies follow: "hike" then finds "Hiked"."""
    svc = opened(limits=Limits(capacity=None))
    svc.add(ALICE, "Hiked the ridge at dawn", topics=["Mountains"])
    svc.add(ALICE, "Bought new boots")
    version = max(_sql.RETOKENIZE_MIGRATIONS)
    with psycopg.connect(clean_url, autocommit=True) as conn:
        conn.execute(  # what the unstemmed tokenizer stored
            "UPDATE langmem_memories SET content_terms = string_to_array(lower(text), ' '), "
            "content_doc = lower(text), topic_terms = '{mountains}', topic_doc = 'mountains'"
        )
        conn.execute(
            "DELETE FROM langmem_migrations WHERE scope = 'core' AND version = %s", (version,)
        )
        conn.execute("DELETE FROM langmem_user_terms")
        conn.execute(
            "INSERT INTO langmem_user_terms (app_name, user_id, term, df) "
            "SELECT app_name, user_id, t, count(*) FROM langmem_memories, "
            "unnest(content_terms || topic_terms) t GROUP BY 1, 2, 3"
        )
    svc.setup()
    with psycopg.connect(clean_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT text, topics, content_doc, topic_doc, content_terms, content_len "
            "FROM langmem_memories"
        ).fetchall()
        df = dict(conn.execute("SELECT term, df FROM langmem_user_terms WHERE df > 0").fetchall())
    for text, topics, content_doc, topic_doc, terms, length in rows:
        expected = _sql.keyword_columns(text, topics, ENGLISH)
        assert (content_doc, topic_doc) == (expected["content_doc"], expected["topic_doc"])
        assert sorted(terms) == expected["content_terms"] and length == expected["content_len"]
    assert df.get("hike") == 1 and "hiked" not in df
    assert [e.text for e in svc.search(ALICE, "hike")] == ["Hiked the ridge at dawn"]


def test_migrations_are_idempotent_and_recorded(clean_url):
    for _ in range(2):
        svc = PostgresMemoryService(clean_url, HashingEmbeddings())
        svc.setup()
        svc.close()
    with psycopg.connect(clean_url) as conn:
        rows = conn.execute(
            "SELECT scope, version, checksum FROM langmem_migrations ORDER BY 1, 2"
        ).fetchall()
    assert [(s, v) for s, v, _ in rows] == [
        ("core", i) for i in range(1, len(_migrations.MIGRATIONS) + 1)
    ] + [("vector", i) for i in range(1, len(_migrations.vector_migrations(4)) + 1)]
    assert [c for s, _, c in rows if s == "core"] == [
        _migrations.checksum(m) for m in _migrations.MIGRATIONS
    ]


def test_shipped_migrations_are_pinned():
    """Shipped migrations are never edited: append a new one instead and pin it here."""
    assert [_migrations.checksum(m) for m in _migrations.MIGRATIONS] == PINNED


PINNED: list[str] = [
    "b402dd12654bd4b4",
    "65d88ede9a5e9f7d",
    "dd0532192569e91e",
    "d1d5584650e25e77",
    "1c6695d26ef1684c",
    "497dc67b4c283c50",
    "5a2a038fd3c68f20",
    "d751b111a9030771",
    "20fc46fcb699cf48",
    "d9d4ca11fe60147d",  # cursor keys, thread claims, dead letters
    "c0aacfb3b376488b",  # expires_at (store TTL)
    "d4e8680fc281ce87",
    "b87cac1d69dd9892",  # langmem_settings: the tokenizer's language
    "590c0e7d5929d77c",  # soft-deleted rows by fingerprint (revive lookups)
    "c0d141a3bc50fb2f",  # participants and location join the keys document
    "09b0ca3c2a2d2694",  # validity: valid_from/valid_to/superseded_by, current fingerprints
]


def legacy_fingerprint(memory, explicit_id=None):
    """The content fingerprint before the participants encoding was made unambiguous."""
    import hashlib

    from langmem_trpc.service.text import normalize_text

    event = memory.event_time.strftime("%Y-%m-%dT%H:%M:%SZ") if memory.event_time else ""
    parts = [
        "text:" + normalize_text(memory.text),
        "kind:" + memory.kind.value,
        "event:" + event,
        "with:" + ",".join(p.casefold() for p in memory.participants),
        "at:" + (memory.location or "").casefold(),
    ]
    if explicit_id is not None:
        parts.append("id:" + explicit_id)
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def test_fingerprint_backfill_recomputes_ambiguous_rows(pg_url, monkeypatch):
    """setup() applying the fingerprint migration: rows stored under the old
    participants encoding are found again by their content afterwards."""
    from langmem_trpc.service import plans

    alice = UserKey("app", "alice")
    svc = PostgresMemoryService(pg_url)
    svc.setup()
    with monkeypatch.context() as m:
        m.setattr(plans, "fingerprint", legacy_fingerprint)
        comma = svc.add(alice, "Met for lunch", participants=["Smith, John"], event_time=T_EVENT)
        plain = svc.add(alice, "Plain memory", participants=["Ana", "Bob"])
    with psycopg.connect(pg_url, autocommit=True) as conn:  # as if never applied
        conn.execute(
            "DELETE FROM langmem_migrations WHERE scope = 'core' AND version = %s",
            (_sql.FINGERPRINT_MIGRATION,),
        )
    svc.setup()  # applies it again: the backfill recomputes the comma row
    again = svc.add(alice, "met for lunch", participants=["smith, john"], event_time=T_EVENT)
    assert again.id == comma.id
    assert svc.add(alice, "Plain memory", participants=["Bob", "Ana"]).id == plain.id
    assert svc.add(alice, "Met for lunch", participants=["Smith", "John"]).id != comma.id
    assert svc.count(alice) == 3
    svc.close()


async def test_concurrent_setup_is_safe(pg_url):
    services = [PostgresMemoryService(pg_url, HashingEmbeddings()) for _ in range(4)]
    await asyncio.gather(*(s.asetup() for s in services))
    for s in services:
        await s.aclose()


def test_dimension_mismatch_is_a_configuration_error(clean_url):
    svc = PostgresMemoryService(clean_url, HashingEmbeddings(size=64))
    with pytest.raises(ConfigurationError, match="384-dimension"):
        svc.setup()
    svc.close()


def test_missing_setup_is_a_configuration_error(pg_url):
    svc = PostgresMemoryService(pg_url)
    with pytest.raises(ConfigurationError, match="setup"):
        svc.add(ALICE, "anything")
    svc.close()


def test_isolation_in_sql_with_lookalike_keys(svc):
    svc.add(UserKey("app", "a_b"), "underscore user likes tea")
    svc.add(UserKey("app", "a%b"), "percent user likes tea")
    svc.add(UserKey("ap", "papp"), "other app likes tea")
    for user in (UserKey("app", "a_b"), UserKey("app", "a%b"), UserKey("ap", "papp")):
        hits = svc.search(user, "likes tea", SearchOptions(hybrid=True))
        assert len(hits) == 1 and hits[0].user_id == user.user_id
        assert svc.count(user) == 1
    assert svc.search(UserKey("app", "aXb"), "likes tea") == []


def test_bulk_add_is_idempotent_and_searchable(svc):
    memories = [Memory(text=f"bulk fact number {i} about topic {i % 7}") for i in range(300)]
    first = svc.add_many(ALICE, memories)
    assert len(first) == 300
    again = svc.add_many(ALICE, memories[:10] + [Memory(text="one more")])
    assert [e.id for e in again[:10]] == [e.id for e in first[:10]]
    assert svc.count(ALICE) == 301
    hits = svc.search(ALICE, "bulk fact number 42", SearchOptions(hybrid=True))
    assert hits[0].text == "bulk fact number 42 about topic 0"


def test_small_and_big_users_both_answer(clean_url):
    """The exact (btree) and HNSW branches of the vector leg return the same top hit."""
    exact = PostgresMemoryService(clean_url, HashingEmbeddings())
    ann = PostgresMemoryService(clean_url, HashingEmbeddings(), exact_search_max=0)
    exact.add_many(ALICE, [Memory(text=f"note {i} on subject {i}") for i in range(200)])
    for svc in (exact, ann):
        hits = svc.search(ALICE, "note 17 on subject 17", SearchOptions(max_results=3))
        assert hits[0].text == "note 17 on subject 17"
        svc.close()


def test_big_user_search_pins_the_hnsw_plan_and_leaves_no_setting_behind(clean_url):
    """Once a user is known to be above exact_search_max, its vector leg runs in
    `langmem_ann_candidates`, whose own settings disable sorts and seq scans (so the
    planner uses HNSW); the same answers, and the pooled connection comes back idle
    with its settings untouched."""
    from psycopg_pool import ConnectionPool

    pool = ConnectionPool(clean_url, min_size=1, max_size=1, open=True, kwargs={"autocommit": True})
    svc = PostgresMemoryService(pool, HashingEmbeddings(), exact_search_max=10)
    svc.add_many(ALICE, [Memory(text=f"note {i} on subject {i}") for i in range(60)])
    for hybrid in (False, True):
        svc._search_cache.sizes.clear()
        options = SearchOptions(max_results=3, hybrid=hybrid)
        first = svc.search(ALICE, "note 17 on subject 17", options)  # learns ALICE's size
        assert svc._search_cache.sizes[ALICE] == 60
        second = svc.search(ALICE, "note 17 on subject 17", options)  # pinned ANN leg
        assert [(e.id, e.score, e.rrf_score) for e in second] == [
            (e.id, e.score, e.rrf_score) for e in first
        ]
        assert second[0].text == "note 17 on subject 17"
    with pool.connection() as conn:
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        row = conn.execute(
            "SELECT current_setting('enable_sort'), current_setting('enable_seqscan'), "
            "current_setting('plan_cache_mode')"
        )
        assert row.fetchone() == ("on", "on", "auto")  # a pool passed in keeps its mode
    svc.close()
    pool.close()


@pytest.mark.parametrize("deduplicate", [True, False])
def test_heavy_vector_only_search_widens_its_pool_when_dedupe_empties_it(opened, deduplicate):
    """A known-heavy user's vector-only search fetches 3 x max_results candidates; when
    near-duplicates fill them, it falls back to the full pool: the same answers as the
    first (full-pool) search."""
    svc = opened(embeddings=HashingEmbeddings(), exact_search_max=0)
    same = "river bank note long text here today again once"
    svc.add_many(ALICE, [f"{same} w{i}" for i in range(30)])  # pairwise Jaccard 0.82
    svc.add_many(ALICE, [f"river bank fact {i} about stone s{i}" for i in range(20)])
    options = SearchOptions(max_results=5, hybrid=False, deduplicate=deduplicate)
    first = svc.search(ALICE, same, options)  # size unknown: the fused statement
    second = svc.search(ALICE, same, options)  # known heavy: narrow ANN fetch, widened
    assert len(first) == 5
    assert [(e.id, e.score) for e in second] == [(e.id, e.score) for e in first]
    if deduplicate:
        assert sum(e.text.startswith(same) for e in second) == 1


def test_heavy_vector_only_kind_fallback_reads_both_kinds_in_one_ann_statement(opened):
    """The narrow ANN fetch of a known-heavy user plans the fallback's unfiltered
    candidates too: the same answers as the fused statement, in one statement."""
    svc = opened(embeddings=HashingEmbeddings(), exact_search_max=0)
    svc.add_many(ALICE, [f"river stone fact {i} about water w{i}" for i in range(20)])
    svc.add(ALICE, "river stone trip", kind=Kind.EPISODE)
    options = SearchOptions(hybrid=False, kind=Kind.EPISODE, kind_fallback=True, max_results=5)
    first = svc.search(ALICE, "river stone", options)  # size unknown: the fused statement
    second = svc.search(ALICE, "river stone", options)  # known heavy: the ANN statement
    assert first[0].memory.kind == Kind.EPISODE and len(first) == 5
    assert [(e.id, e.score) for e in second] == [(e.id, e.score) for e in first]


async def test_sync_call_on_the_event_loop_thread_does_not_deadlock(clean_url):
    from psycopg_pool import AsyncConnectionPool

    pool = AsyncConnectionPool(clean_url, open=False, kwargs={"autocommit": True})
    await pool.open()
    svc = PostgresMemoryService(pool, HashingEmbeddings())
    await svc.aadd(ALICE, "async added")
    assert [e.text for e in svc.read(ALICE)] == ["async added"]  # sync, on the loop thread
    await svc.aclose()
    await pool.close()


def test_import_langmem_trpc_does_not_import_psycopg():
    code = "import sys, langmem_trpc; assert 'psycopg' not in sys.modules, 'psycopg imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_extra_gives_an_install_hint():
    code = (
        "import sys; sys.modules['psycopg'] = None\n"
        "import langmem_trpc\n"
        "try:\n    langmem_trpc.PostgresMemoryService\n"
        "except langmem_trpc.ConfigurationError as e:\n    assert 'langmem-trpc[postgres]' in str(e), e\n"
        "else:\n    raise SystemExit('no error')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_pool_size_validation():
    with pytest.raises(ConfigurationError):
        PostgresMemoryService("postgresql://x", pool_size=0)
    with pytest.raises(ConfigurationError):
        PostgresMemoryService(42)  # type: ignore[arg-type]


def test_limits_capacity_error_writes_nothing_in_bulk(clean_url):
    svc = PostgresMemoryService(clean_url, limits=Limits(capacity=5))
    from langmem_trpc import CapacityExceededError

    with pytest.raises(CapacityExceededError):
        svc.add_many(ALICE, [Memory(text=f"m{i} text") for i in range(6)])
    assert svc.count(ALICE) == 0
    svc.close()


@pytest.mark.postgres
def test_unreachable_server_fails_fast_with_a_safe_backend_error(tmp_path):
    import time

    from langmem_trpc import BackendError

    dsn = f"host={tmp_path} port=1 dbname=nothing user=secret_user password=hunter2"
    svc = PostgresMemoryService(dsn, pool_timeout=0.5)
    started = time.perf_counter()
    with pytest.raises(BackendError) as info:
        svc.add(ALICE, "never stored")
    assert time.perf_counter() - started < 10
    assert "hunter2" not in str(info.value) and "secret_user" not in str(info.value)
    svc.close()


@pytest.mark.postgres
async def test_unreachable_server_fails_fast_async(tmp_path):
    import time

    from langmem_trpc import BackendError

    svc = PostgresMemoryService(f"host={tmp_path} port=1 dbname=nothing", pool_timeout=0.5)
    started = time.perf_counter()
    with pytest.raises(BackendError):
        await svc.asearch(ALICE, "anything")
    assert time.perf_counter() - started < 10
    await svc.aclose()


def test_owned_pool_prepares_generic_plans(clean_url):
    """The service's own connections cache generic plans (planning the search statement
    costs more than running it for a typical user); heavy users' ANN scans plan custom
    ones inside their function."""
    svc = PostgresMemoryService(clean_url, pool_size=1)
    svc.count(ALICE)
    with svc._pool().connection() as conn:
        row = conn.execute("SELECT current_setting('plan_cache_mode')").fetchone()
    assert row == ("force_generic_plan",)
    svc.close()


async def test_bulk_copy_keeps_every_field_sync_and_async(svc):
    """add_many streams rows with binary COPY: fields, vectors and history survive both twins."""
    from datetime import datetime, timezone

    when = datetime(2024, 5, 1, 12, 30, tzinfo=timezone.utc)
    memories = [
        Memory(
            text=f"Trip {i} to Kyoto 京都の旅",
            topics=["travel", "japan"],
            kind="episode",
            event_time=when,
            participants=["Ana", "Bo"],
            location="Kyoto",
            metadata={"n": i, "tags": ["x"]},
        )
        for i in range(3)
    ]
    assert len(svc.add_many(ALICE, memories[:2])) == 2
    assert len(await svc.aadd_many(ALICE, memories)) == 3
    assert len(await svc.aadd_many(BOB, memories)) == 3
    assert svc.count(ALICE) == 3
    entries = sorted(svc.read(ALICE), key=lambda e: e.memory.metadata["n"])
    assert [e.memory for e in entries] == [svc.get(ALICE, e.id).memory for e in entries]
    assert entries[2].memory.model_dump() == memories[2].model_dump()
    assert [h.operation.value for h in svc.history(ALICE, entries[0].id)] == ["add"]
    hits = await svc.asearch(ALICE, "Trip 2 Kyoto", SearchOptions(hybrid=True, max_results=1))
    assert hits[0].memory.metadata["n"] == 2


def test_bulk_rows_and_their_history_are_one_statement(clean_url):
    """A run of new content is one INSERT writing the rows and their "add" events (no
    history statement of its own), with the same columns as rows added one by one."""
    from langmem_trpc.types import Source

    statements: list[str] = []
    sync_pool, _ = _counting_pools(clean_url, statements)
    svc = PostgresMemoryService(sync_pool, HashingEmbeddings())
    try:
        single = svc.add(BOB, "Lunch with Ana, Bo in Kyoto", topics=["Food trips"])
        statements.clear()
        source = Source(thread_id="t1", message_ids=["m1"])
        texts = [f"Lunch with Ana, Bo in Kyoto {i}" for i in range(3)]
        memories = [Memory(text=t, topics=["Food trips"]) for t in texts]
        entries = svc.add_many(ALICE, memories, source=source)
        assert not any(s.lstrip().startswith("INSERT INTO langmem_history") for s in statements)
        assert sum("INSERT INTO langmem_history" in s for s in statements) == 1
        for entry in entries:
            (event,) = svc.history(ALICE, entry.id)
            assert (event.operation.value, event.text_before, event.text_after) == (
                "add",
                None,
                entry.text,
            )
            assert event.at == entry.created_at and event.source == source
            assert svc.get(ALICE, entry.id).memory.metadata == {}
        names = ["content_terms", "topic_terms", "content_len", "topic_len", "content_doc"]
        names += ["topic_doc"]
        with psycopg.connect(clean_url) as conn:
            for entry, memory in ((entries[0], memories[0]), (single, single.memory)):
                got = conn.execute(
                    f"SELECT {', '.join(names)}, metadata FROM langmem_memories WHERE id = %s",
                    (entry.id,),
                ).fetchone()
                want = _sql.keyword_columns(memory.text, memory.topics, ENGLISH)
                assert list(got) == [*(want[n] for n in names), {}]
                (stored,) = conn.execute(
                    "SELECT embedding::real[] FROM langmem_memories WHERE id = %s", (entry.id,)
                ).fetchone()
                vector = HashingEmbeddings().embed_documents([memory.text])[0]
                assert stored == pytest.approx(vector, rel=1e-6, abs=1e-7)
    finally:
        svc.close()
        sync_pool.close()


def test_ann_function_scans_the_half_precision_hnsw_index(svc, clean_url):
    """`langmem_ann_candidates` repeats the halfvec index expression and predicate
    (vector migration 4) exactly, and its SET clauses pin the plan to the index: its
    body, planned under the same settings, scans the index."""
    svc.add_many(ALICE, [Memory(text=f"note {i} on subject {i}") for i in range(50)])
    query = HashingEmbeddings().embed_query("note 7")
    with psycopg.connect(clean_url) as conn:
        body, config = conn.execute(
            "SELECT prosrc, proconfig FROM pg_proc WHERE proname = 'langmem_ann_candidates'"
        ).fetchone()
        assert set(config) == {
            "enable_seqscan=off",
            "enable_sort=off",
            "plan_cache_mode=force_custom_plan",
        }
        for setting in config:
            name, value = setting.split("=")
            conn.execute("SELECT set_config(%s, %s, true)", (name, value))
        names = ["p_app", "p_user", "p_q", "p_kind", "p_after", "p_before", "p_pool", "p_now"]
        names.append("p_as_of")
        for i, name in reversed(list(enumerate(names, start=1))):
            body = body.replace(name, f"${i}")
        prepare = (
            "PREPARE ann(text, text, vector, text, timestamptz, timestamptz, integer,"
            " timestamptz, timestamptz) AS "
        )
        result = conn.pgconn.exec_((prepare + body).encode())  # simple protocol: $n are PREPARE's
        assert result.status == psycopg.pq.ExecStatus.COMMAND_OK, result.error_message
        args = psycopg.sql.SQL(", ").join(
            psycopg.sql.Literal(v) for v in (ALICE.app_name, ALICE.user_id, str(query))
        )
        explain = psycopg.sql.SQL(
            "EXPLAIN EXECUTE ann({}, NULL, NULL, NULL, 30, now(), NULL)"
        ).format(args)
        plan = conn.execute(explain).fetchall()
    text = "\n".join(r[0] for r in plan)
    assert "langmem_memories_embedding_hnsw_ready" in text  # the current view's filter inside
    assert "Seq Scan" not in text


def test_search_learns_the_dimension_when_another_process_ran_setup(opened):
    writer = opened(embeddings=HashingEmbeddings())
    writer.add(ALICE, "Prefers window seats")
    reader = opened(embeddings=HashingEmbeddings(), exact_search_max=0)  # no setup(), no dims
    assert reader._search_cache.dims is None
    for _ in range(2):  # the second search is pinned to the index
        assert reader.search(ALICE, "window seats")[0].text == "Prefers window seats"
    assert reader._search_cache.dims == len(HashingEmbeddings().embed_query("x"))


@pytest.mark.parametrize("exact_max", [10_000, 0], ids=["exact", "hnsw"])
def test_search_never_serves_a_cached_entry_after_another_writer_changed_it(opened, exact_max):
    """Candidates' entries are cached by row version: a write by another service (process)
    makes a new version, so the next search returns the new content."""
    reader = opened(embeddings=HashingEmbeddings(), exact_search_max=exact_max)
    writer = opened(embeddings=HashingEmbeddings())
    entry = writer.add(ALICE, "Lives in Lisbon", topics=["home"], metadata={"v": 1})
    writer.add(BOB, "Lives in Lisbon", memory_id=entry.id, metadata={"v": "bob"})
    options = SearchOptions(hybrid=True, max_results=3)
    for _ in range(2):  # the second search reads the cache
        hit = reader.search(ALICE, "lisbon", options)[0]
        assert (hit.id, hit.memory.metadata) == (entry.id, {"v": 1})
    assert len(reader._search_cache.entries) >= 1
    writer.update(ALICE, entry.id, "Lives in Lisbon", metadata={"v": 2})
    assert reader.search(ALICE, "lisbon", options)[0].memory.metadata == {"v": 2}
    writer.add(ALICE, "Lives in Lisbon", topics=["city"])  # topic refresh, same id
    assert reader.search(ALICE, "lisbon", options)[0].memory.topics == ["home", "city"]
    writer.restore(ALICE, entry)  # back to the exported content and timestamps
    hit = reader.search(ALICE, "lisbon", options)[0]
    assert (hit.memory.topics, hit.memory.metadata) == (["home"], {"v": 1})
    assert reader.search(BOB, "lisbon", options)[0].memory.metadata == {"v": "bob"}
    writer.delete(ALICE, entry.id)
    assert reader.search(ALICE, "lisbon", options) == []


@pytest.mark.parametrize("embeddings", [None, HashingEmbeddings()], ids=["keyword", "hybrid"])
def test_keyword_leg_scan_and_gin_branches_agree(opened, monkeypatch, embeddings):
    """Small users are keyword-matched over their own rows, big ones through the GIN
    index (`KEYWORD_SCAN_MAX`): the same candidates and scores either way."""
    svc = opened(embeddings=embeddings)
    for text, topics in STORED_DOC_TEXTS:
        svc.add(ALICE, text, topics=topics)
    queries = ["go production", "東京 天気", "kubernetes ops", "C#", "backend"]
    scanned = [_scored(svc, q) for q in queries]
    assert all(scanned)
    monkeypatch.setattr(_search_sql, "KEYWORD_SCAN_MAX", 0)
    assert [_scored(svc, q) for q in queries] == scanned


# --- deferred indexing (bulk imports) -------------------------------------------


def _pending_rows(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM langmem_memories WHERE deleted_at IS NULL AND NOT indexed"
        ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("exact_max", [10_000, 0], ids=["exact", "hnsw"])
def test_deferred_bulk_load_is_searchable_before_and_after_indexing(opened, clean_url, exact_max):
    """Rows loaded with defer_index=True are outside the HNSW graph until index_pending():
    searches return the same hits before, during (half indexed) and after, for the
    exact branch, the unpinned ANN statement and the pinned one."""
    svc = opened(embeddings=HashingEmbeddings(), exact_search_max=exact_max)
    ref = opened(embeddings=HashingEmbeddings(), exact_search_max=exact_max)
    indexed = [Memory(text=f"indexed note n{i} about river r{i}") for i in range(40)]
    deferred = [Memory(text=f"deferred note n{i} about mountain m{i}") for i in range(60)]
    assert len(svc.add_many(ALICE, indexed)) == 40
    assert len(svc.add_many(ALICE, deferred, defer_index=True)) == 60
    assert len(svc.add_many(BOB, deferred[:5])) == 5  # another user's default path
    assert svc.pending_count(ALICE) == 60 and svc.pending_count(BOB) == 0
    assert _pending_rows(clean_url) == 60
    queries = ["deferred note n17 about mountain m17", "indexed note n13 about river r13"]
    options = [SearchOptions(max_results=5, hybrid=h) for h in (False, True)]

    def answers() -> list[list[str]]:
        return [[e.text for e in svc.search(ALICE, q, o)] for q in queries for o in options]

    before = answers()
    assert before == answers()  # second pass: the user's size is known, ANN leg pinned
    assert [a[0] for a in before] == [queries[0]] * 2 + [queries[1]] * 2, before
    from langmem_trpc.backends.postgres import _bulk

    assert len(svc._run(_bulk.pending_op(ALICE, 30))) == 30  # one batch: half indexed
    assert svc.pending_count(ALICE) == 30
    assert [a[0] for a in answers()] == [a[0] for a in before]
    assert svc.index_pending(ALICE, batch_size=25) == 30
    assert svc.pending_count() == 0 and _pending_rows(clean_url) == 0
    after = answers()
    assert [a[0] for a in after] == [a[0] for a in before]
    bob_query = "deferred note n3 about mountain m3"
    assert [e.text for e in ref.search(BOB, bob_query, options[0])][0] == bob_query


def test_index_pending_finds_each_batch_row_by_tid_right_after_a_bulk_load(opened, clean_url):
    """Just after a bulk load the planner's statistics are stale; a batch joined back on
    the key was planned as a scan of the user's rows per row (quadratic in the load).
    The batch's locked rows are found by `ctid`: a TID scan, or (once statistics caught up,
    e.g. after an autovacuum analyze) a hash join on `ctid`; never a key lookup per row."""
    svc = opened(embeddings=HashingEmbeddings())
    svc.add_many(ALICE, [Memory(text=f"deferred note {i}") for i in range(300)], defer_index=True)
    params = {"app": None, "user": None, "limit": 100}
    with psycopg.connect(clean_url) as conn:
        plan = "\n".join(
            row[0] for row in conn.execute("EXPLAIN " + _sql.PENDING_BATCH, params).fetchall()
        )
    by_tid = "Tid Scan on langmem_memories m" in plan or "(m.ctid = b.ctid)" in plan
    assert by_tid and "langmem_memories_user_updated" not in plan, plan
    assert svc.index_pending(ALICE, batch_size=100) == 300 and svc.pending_count() == 0


async def test_deferred_load_async_and_index_pending_of_every_user(opened, clean_url):
    svc = opened(embeddings=HashingEmbeddings(), exact_search_max=0)
    for user in (ALICE, BOB):
        added = await svc.aadd_many(
            user, [f"{user.user_id} fact item{i}" for i in range(30)], defer_index=True
        )
        assert len(added) == 30
    assert await svc.apending_count() == 60
    hit = (await svc.asearch(BOB, "bob fact item7", SearchOptions(max_results=1)))[0]
    assert (hit.user_id, hit.text) == ("bob", "bob fact item7")
    assert await svc.aindex_pending() == 60
    assert await svc.apending_count() == 0
    hit = (await svc.asearch(ALICE, "alice fact item7", SearchOptions(max_results=1)))[0]
    assert (hit.user_id, hit.text) == ("alice", "alice fact item7")


def test_deferred_rows_follow_update_delete_and_revive(opened, clean_url):
    """Writes on a pending row keep it correct: update and revive index it (the default
    path), delete removes it from search and from the pending set."""
    svc = opened(embeddings=HashingEmbeddings(), exact_search_max=0)
    svc.add_many(ALICE, [f"pending fact {i}" for i in range(10)], defer_index=True)
    rows = {e.text: e for e in svc.read(ALICE)}
    svc.update(ALICE, rows["pending fact 1"].id, "pending fact one, updated")
    svc.delete(ALICE, rows["pending fact 2"].id)
    assert svc.pending_count(ALICE) == 8
    texts = [e.text for e in svc.search(ALICE, "pending fact", SearchOptions(max_results=20))]
    assert "pending fact 2" not in texts and "pending fact one, updated" in texts
    svc.add(ALICE, "pending fact 2")  # revives the deleted row through the default path
    assert svc.pending_count(ALICE) == 8
    assert svc.search(ALICE, "pending fact 2", SearchOptions(max_results=1))[0].text == (
        "pending fact 2"
    )


def test_pending_leg_reads_the_partial_btree_not_the_users_rows(svc, clean_url):
    """With nothing pending, the exact pending leg is an index probe of the (empty)
    partial index, so the default path pays nothing for it."""
    svc.add_many(ALICE, [Memory(text=f"note {i} on subject {i}") for i in range(50)])
    query = HashingEmbeddings().embed_query("note 7")
    built = _search_sql.build_search(ALICE, SearchOptions(query="note 7"), None, 30, query, 0)
    with psycopg.connect(clean_url) as conn:
        conn.execute("ANALYZE langmem_memories")
        plan = "\n".join(
            r[0] for r in conn.execute("EXPLAIN " + built.sql, built.params).fetchall()
        )
    assert "langmem_memories_pending" in plan


def test_index_pending_rejects_a_bad_batch_size(svc):
    from langmem_trpc.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="batch_size"):
        svc.index_pending(batch_size=0)


@pytest.mark.parametrize("size", [0, 1])
def test_entry_cache_size_is_configurable(opened, size):
    svc = opened(embeddings=HashingEmbeddings(), entry_cache_size=size)
    for i in range(3):
        svc.add(ALICE, f"cached fact {i}")
    for _ in range(2):
        assert len(svc.search(ALICE, "cached fact", SearchOptions(max_results=3))) == 3
    assert len(svc._search_cache.entries) == size
    with pytest.raises(ConfigurationError, match="entry_cache_size"):
        opened(entry_cache_size=-1)


def test_pinned_ann_leg_merges_pending_rows_even_with_a_stale_user_size(opened):
    """A user remembered as big (pinned ANN over indexed rows) who is now small still gets
    their not-yet-indexed rows."""
    svc = opened(embeddings=HashingEmbeddings(), exact_search_max=50)
    svc.add_many(ALICE, [f"indexed item{i}" for i in range(10)])
    svc.add_many(ALICE, [f"pending item{i}" for i in range(20)], defer_index=True)
    svc._search_cache.sizes[ALICE] = 10_000  # stale: learnt before the user shrank
    hit = svc.search(ALICE, "pending item7", SearchOptions(max_results=1, hybrid=False))[0]
    assert hit.text == "pending item7"


def _counting_pools(url: str, statements: list[str]):
    """A sync and an async pool whose cursors record every statement they execute."""
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

    class Counting(psycopg.Cursor):
        def execute(self, query, params=None, **kwargs):
            statements.append(str(query))
            return super().execute(query, params, **kwargs)

    class AsyncCounting(psycopg.AsyncCursor):
        async def execute(self, query, params=None, **kwargs):
            statements.append(str(query))
            return await super().execute(query, params, **kwargs)

    kwargs = {"autocommit": True}
    sync = ConnectionPool(url, kwargs={**kwargs, "cursor_factory": Counting}, min_size=1, open=True)
    aio = AsyncConnectionPool(
        url, kwargs={**kwargs, "cursor_factory": AsyncCounting}, min_size=1, open=False
    )
    return sync, aio


@pytest.mark.parametrize("embeddings", [None, HashingEmbeddings()], ids=["keyword", "hybrid"])
async def test_search_runs_one_statement_even_with_the_kind_fallback(clean_url, embeddings):
    """Once the entry cache holds the candidates, a search is one statement: both legs
    and, for the kind fallback, the unfiltered legs too (no second round trip)."""
    statements: list[str] = []
    sync_pool, async_pool = _counting_pools(clean_url, statements)
    await async_pool.open()
    try:
        for pool, is_async in ((sync_pool, False), (async_pool, True)):
            svc = PostgresMemoryService(pool, embeddings)  # only `pool`'s statements are counted
            svc.add_many(ALICE, [f"sushi dinner number {i} with friends" for i in range(6)])
            svc.add(ALICE, "sushi night out", kind=Kind.EPISODE)
            for options in (
                SearchOptions(kind=Kind.EPISODE, kind_fallback=True),  # 1 episode: falls back
                SearchOptions(deduplicate=True),
                SearchOptions(kind=Kind.FACT),
            ):
                warm = svc.search(ALICE, "sushi dinner", options)  # fills the entry cache
                if is_async:
                    await svc.asearch(ALICE, "sushi dinner", options)  # prepares its connection
                statements.clear()
                if is_async:
                    hits = await svc.asearch(ALICE, "sushi dinner", options)
                else:
                    hits = svc.search(ALICE, "sushi dinner", options)
                assert [h.id for h in hits] == [h.id for h in warm]
                assert len(statements) == 1, statements
            fallback = svc.search(
                ALICE, "sushi dinner", SearchOptions(kind=Kind.EPISODE, kind_fallback=True)
            )
            assert fallback[0].memory.kind == Kind.EPISODE and len(fallback) == 7
            svc.clear(ALICE)
            await svc.aclose()
    finally:
        sync_pool.close()
        await async_pool.close()


@pytest.mark.parametrize("hybrid", [False, True], ids=["vector", "hybrid"])
async def test_search_sends_one_statement_per_tier(clean_url, hybrid):
    """A normal user's search that needs a deeper tier (max_results above the first
    tier's pool) sends one statement per tier once the entry cache is warm, sync and
    async: the shared read plan's `FetchLegs`, each one statement."""
    statements: list[str] = []
    sync_pool, async_pool = _counting_pools(clean_url, statements)
    await async_pool.open()
    options = SearchOptions(
        max_results=8, hybrid=hybrid, deduplicate=False, fusion=FusionSettings(min_pool=5)
    )
    try:
        for pool, is_async in ((sync_pool, False), (async_pool, True)):
            svc = PostgresMemoryService(pool, HashingEmbeddings())
            svc.add_many(ALICE, [f"sushi dinner number {i} with friends" for i in range(12)])
            warm = svc.search(ALICE, "sushi dinner with friends", options)
            if is_async:
                await svc.asearch(ALICE, "sushi dinner with friends", options)
            statements.clear()
            if is_async:
                hits = await svc.asearch(ALICE, "sushi dinner with friends", options)
            else:
                hits = svc.search(ALICE, "sushi dinner with friends", options)
            assert [h.id for h in hits] == [h.id for h in warm] and len(hits) == 8
            assert len(statements) == 2, statements  # tiers of 5 and 20 candidates per leg
            assert all("langmem_memories" in s for s in statements)
            svc.clear(ALICE)
            await svc.aclose()
    finally:
        sync_pool.close()
        await async_pool.close()
