"""Validity on PostgreSQL (service/validity.py): the migration of an existing database, the
executor's validity steps, and the views of read and of the one hybrid search statement.

Chains are written with the executor's own steps (`run_plan`), so these tests hold the
storage rules whatever plan writes them; the write rules themselves are the
conformance suite's.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from langmem_trpc import Memory, PostgresMemoryService, SearchOptions, UserKey
from langmem_trpc.backends.postgres import _migrations, _sql
from langmem_trpc.errors import InvalidInputError, InvalidTimeError
from langmem_trpc.service import steps
from langmem_trpc.service.rules import fingerprint
from langmem_trpc.testing import HashingEmbeddings
from langmem_trpc.types import Entry

pytestmark = pytest.mark.postgres

ALICE = UserKey("app", "alice")
BOB = UserKey("app", "bob")
T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
TABLES = "langmem_memories, langmem_history, langmem_user_stats, langmem_user_terms"


@pytest.fixture(scope="module")
def schema_url(pg_module_url):
    with PostgresMemoryService(pg_module_url, HashingEmbeddings()) as svc:
        svc.setup()
    return pg_module_url


@pytest.fixture
def url(schema_url):
    with psycopg.connect(schema_url, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {TABLES}")
    return schema_url


@pytest.fixture(params=[10_000, 0], ids=["exact", "hnsw"])
def svc(url, request):
    with PostgresMemoryService(url, HashingEmbeddings(), exact_search_max=request.param) as service:
        yield service


def _entry(user: UserKey, memory_id: str, text: str, **validity: Any) -> Entry:
    return Entry(
        id=memory_id,
        app_name=user.app_name,
        user_id=user.user_id,
        memory=Memory(text=text),
        created_at=T0,
        updated_at=T0,
        **validity,
    )


def _insert(user: UserKey, entries: Sequence[Entry]) -> steps.Plan[None]:
    """The executor's `Insert` of these entries (COPY for more than one), with vectors."""
    vectors = yield steps.Embed(tuple(e.text for e in entries))
    rows = tuple(
        steps.NewRow(e, fingerprint(e.memory), False, v)
        for e, v in zip(entries, vectors, strict=True)
    )
    yield steps.Insert(user, rows)


def chain(user: UserKey, versions: int, text: str = "Production runs Go 1.{i}") -> list[Entry]:
    """`versions` versions of one fact, a day each from T0, each superseded by the next;
    the last is current (open)."""
    ids = [f"{user.user_id}-v{i}" for i in range(versions)]
    return [
        _entry(
            user,
            ids[i],
            text.format(i=i),
            valid_from=T0 + timedelta(days=i),
            valid_to=None if i == versions - 1 else T0 + timedelta(days=i + 1),
            superseded_by=None if i == versions - 1 else ids[i + 1],
        )
        for i in range(versions)
    ]


def _run(svc: PostgresMemoryService, plan: Generator[Any, Any, Any]) -> Any:
    return svc.run_plan(plan)


def _find(svc: PostgresMemoryService, step: Any) -> Any:
    def plan() -> steps.Plan[Any]:
        found = yield step
        return found

    return _run(svc, plan())


# --- the executor's steps ------------------------------------------------------


@pytest.mark.parametrize("versions", [1, 3], ids=["insert", "copy"])
def test_insert_stores_validity_as_given(url, versions):
    with PostgresMemoryService(url, HashingEmbeddings()) as svc:
        entries = chain(ALICE, versions)
        for entry in entries:  # one row per Insert: the single-row statement
            _run(svc, _insert(ALICE, [entry]))
        _run(svc, _insert(BOB, chain(BOB, versions)))  # one Insert: the COPY path
        for user, expected in ((ALICE, entries), (BOB, chain(BOB, versions))):
            stored = sorted(svc.read(user, include_superseded=True), key=lambda e: e.id)
            assert [(e.valid_from, e.valid_to, e.superseded_by) for e in stored] == [
                (e.valid_from, e.valid_to, e.superseded_by) for e in expected
            ]


def test_set_validity_closes_and_reopens_without_touching_content(url):
    with PostgresMemoryService(url, HashingEmbeddings()) as svc:
        old, new = _entry(ALICE, "old", "Lives in Lisbon"), _entry(ALICE, "new", "Lives in Porto")
        _run(svc, _insert(ALICE, [old, new]))
        target = _find(svc, steps.FindById(ALICE, "old"))
        at = T0 + timedelta(days=3)
        _run(svc, _set(target, T0 + timedelta(days=2), "new", at))
        closed = svc.get(ALICE, "old")
        assert (closed.valid_to, closed.superseded_by, closed.updated_at) == (
            T0 + timedelta(days=2),
            "new",
            at,
        )
        assert (closed.text, closed.created_at, closed.valid_from) == ("Lives in Lisbon", T0, T0)
        assert "old" not in [h.id for h in svc.search(ALICE, "lisbon")]
        predecessor = _find(svc, steps.FindPredecessor(ALICE, "new"))
        assert (predecessor.entry.id, predecessor.deleted) == ("old", False)
        assert _find(svc, steps.FindPredecessor(ALICE, "old")) is None
        assert _find(svc, steps.FindPredecessor(BOB, "new")) is None  # other users never
        _run(svc, _set(target, None, None, at))  # reopen
        assert svc.get(ALICE, "old").superseded_by is None
        assert svc.search(ALICE, "lisbon")[0].id == "old"  # the same vector, found again


def _set(target: steps.Stored, valid_to, superseded_by, at) -> steps.Plan[None]:
    yield steps.SetValidity(ALICE, target, valid_to, superseded_by, at)


def test_fingerprint_finds_skip_superseded_rows_and_a_new_version_may_share_one(url):
    """A superseded version keeps its fingerprint (KnownFingerprints sees it, the finds by
    content do not), and a current row may hold the same fingerprint."""
    with PostgresMemoryService(url, HashingEmbeddings()) as svc:
        old = _entry(ALICE, "old", "Runs Go 1.23", superseded_by="mid", valid_to=T0)
        mid = _entry(ALICE, "mid", "Runs Go 1.24")
        _run(svc, _insert(ALICE, [old, mid]))
        fp = fingerprint(old.memory)
        assert _find(svc, steps.FindLiveByFingerprint(ALICE, fp)) is None
        assert _find(svc, steps.FindByFingerprint(ALICE, fp)) is None
        assert _find(svc, steps.KnownFingerprints(ALICE, frozenset({fp}))) == {fp}
        _run(svc, _insert(ALICE, [_entry(ALICE, "back", "Runs Go 1.23")]))  # same content
        found = _find(svc, steps.FindByFingerprint(ALICE, fp))
        assert (found.entry.id, found.deleted) == ("back", False)
        assert _find(svc, steps.FindLiveByFingerprint(ALICE, fp, exclude_id="back")) is None
        with pytest.raises(Exception, match="langmem_memories_current_fingerprint|failed"):
            _run(svc, _insert(ALICE, [_entry(ALICE, "twin", "Runs Go 1.23")]))


def test_counts_current_rows_and_capacity_counts_every_live_row(url):
    with PostgresMemoryService(url, HashingEmbeddings()) as svc:
        _run(svc, _insert(ALICE, chain(ALICE, 5)))
        _run(svc, _insert(BOB, chain(BOB, 2)))
        assert (svc.count(ALICE), svc.count(BOB)) == (1, 1)
        assert _find(svc, steps.CountLive(ALICE)) == 5
        assert ALICE in svc.users("app")
        head = _find(svc, steps.FindById(BOB, "bob-v1"))

        def close_head() -> steps.Plan[None]:  # bob's only current row superseded too
            yield steps.SetValidity(BOB, head, T0, "elsewhere", T0)

        _run(svc, close_head())
        assert svc.count(BOB) == 0 and BOB not in svc.users("app")


def test_get_returns_a_superseded_version_marked(url):
    with PostgresMemoryService(url, HashingEmbeddings()) as svc:
        _run(svc, _insert(ALICE, chain(ALICE, 2)))
        old = svc.get(ALICE, "alice-v0")
        assert old.superseded and old.superseded_by == "alice-v1"


# --- reads ---------------------------------------------------------------------


def test_read_views(url):
    with PostgresMemoryService(url, HashingEmbeddings()) as svc:
        lapsed = _entry(ALICE, "lapsed", "In Tokyo this week", valid_to=T0 + timedelta(days=1))
        ahead = _entry(ALICE, "ahead", "Moving to Berlin", valid_from=T0 + timedelta(days=900))
        _run(svc, _insert(ALICE, [*chain(ALICE, 3), lapsed, ahead]))
        ids = {e.id for e in svc.read(ALICE)}
        assert ids == {"alice-v2", "ahead"}  # a plan in the future is current knowledge
        assert {e.id for e in svc.read(ALICE, as_of=T0 + timedelta(hours=30))} == {"alice-v1"}
        assert {e.id for e in svc.read(ALICE, as_of="2025-01-01")} == {"alice-v0", "lapsed"}
        assert len(svc.read(ALICE, include_superseded=True)) == 5
        assert len(svc.read(ALICE, 2, include_superseded=True)) == 2


def test_bad_views_are_refused_before_any_io():
    """Validation runs before the plan opens a connection: a server that does not
    exist is never reached."""
    svc = PostgresMemoryService("postgresql://nobody@127.0.0.1:9/none", pool_timeout=0.1)
    with pytest.raises(InvalidTimeError, match="as_of"):
        svc.read(ALICE, as_of="not a date")
    with pytest.raises(InvalidInputError, match="include_superseded"):
        svc.read(ALICE, include_superseded="yes")
    with pytest.raises(InvalidInputError, match="include_superseded"):
        svc.read(ALICE, as_of=T0, include_superseded=True)
    svc.close()


async def test_bad_views_are_refused_before_any_io_async():
    svc = PostgresMemoryService("postgresql://nobody@127.0.0.1:9/none", pool_timeout=0.1)
    with pytest.raises(InvalidInputError, match="include_superseded"):
        await svc.aread(ALICE, as_of=T0, include_superseded=True)
    with pytest.raises(InvalidTimeError, match="as_of"):
        await svc.asearch(ALICE, "x", SearchOptions(as_of="yesterday-ish"))
    await svc.aclose()


# --- search ----------------------------------------------------------------------


def test_search_views_inside_the_statement(svc):
    """A chain of 100 versions of one fact: the default search finds the current one
    (old versions never fill the candidate pool), `as_of` the one true then,
    `include_superseded` old ones too."""
    _run(svc, _insert(ALICE, chain(ALICE, 100)))
    other = _entry(ALICE, "other", "Staging runs Go 1.1", valid_from=T0 + timedelta(hours=1))
    _run(svc, _insert(ALICE, [other]))
    svc.search(ALICE, "warm the size cache")
    options = SearchOptions(max_results=3, hybrid=True)
    hits = svc.search(ALICE, "production runs go", options)
    assert hits[0].id == "alice-v99" and all(not h.superseded for h in hits)
    past = svc.search(ALICE, "production runs go", options.model_copy(update={"as_of": T0}))
    assert [h.id for h in past] == ["alice-v0"]
    every = SearchOptions(max_results=10, include_superseded=True)
    assert sum(h.superseded for h in svc.search(ALICE, "production runs go", every)) >= 9
    vector_only = SearchOptions(max_results=3, hybrid=False)
    assert svc.search(ALICE, "production runs go", vector_only)[0].id == "alice-v99"
    as_of = SearchOptions(max_results=3, hybrid=False, as_of=T0 + timedelta(days=50, hours=1))
    found = [h.id for h in svc.search(ALICE, "production runs go 1.50", as_of)]
    assert found[0] == "alice-v50" and set(found) <= {"alice-v50", "other"}


@pytest.mark.parametrize("exact_max", [10_000, 0], ids=["exact", "hnsw"])
async def test_async_twins_read_the_same_views(url, exact_max):
    svc = PostgresMemoryService(url, HashingEmbeddings(), exact_search_max=exact_max)
    try:
        await svc.arun_plan(_insert(ALICE, chain(ALICE, 30)))
        await svc.asearch(ALICE, "warm the size cache")
        hits = await svc.asearch(ALICE, "production runs go", SearchOptions(max_results=3))
        assert hits[0].id == "alice-v29" and not any(h.superseded for h in hits)
        past = await svc.asearch(ALICE, "production runs go", SearchOptions(as_of=T0))
        assert [h.id for h in past] == ["alice-v0"]
        assert [e.id for e in await svc.aread(ALICE, as_of="2025-01-02T12:00:00")] == ["alice-v1"]
        assert len(await svc.aread(ALICE, include_superseded=True)) == 30
        assert (await svc.aget(ALICE, "alice-v0")).superseded_by == "alice-v1"
        assert (await svc.acount(ALICE), await svc.ausers("app")) == (1, [ALICE])
    finally:
        await svc.aclose()


def test_search_hides_a_lapsed_row_but_as_of_finds_it(svc):
    tokyo = _entry(ALICE, "tokyo", "In Tokyo until Friday", valid_to=T0 + timedelta(days=4))
    _run(svc, _insert(ALICE, [tokyo, _entry(ALICE, "home", "Home is in Osaka")]))
    svc.search(ALICE, "warm the size cache")
    assert [h.id for h in svc.search(ALICE, "tokyo")] == []
    assert [h.id for h in svc.search(ALICE, "tokyo", SearchOptions(as_of=T0))] == ["tokyo"]


def test_migration_fills_validity_of_existing_rows(pg_url):
    """A database set up before validity (core migrations 1-15, vector 1-5) with rows:
    setup() backfills valid_from = event time or creation time, leaves the rows current,
    swaps the fingerprint index and the ANN function, and search and count work."""
    dims = len(HashingEmbeddings().embed_query("x"))
    old_core, old_vector = _migrations.MIGRATIONS[:15], _migrations.vector_migrations(dims)[:5]
    with psycopg.connect(pg_url, autocommit=True) as conn, conn.transaction():
        conn.execute(_sql.CREATE_EXTENSION)
        conn.execute(_sql.CREATE_MIGRATIONS_TABLE)
        for scope, migrations in (("core", old_core), ("vector", old_vector)):
            for version, sql in enumerate(migrations, start=1):
                conn.execute(sql)
                conn.execute(_sql.RECORD_MIGRATION, (scope, version, _migrations.checksum(sql)))
        event = datetime(2024, 5, 6, 16, 30, tzinfo=timezone.utc)
        texts = [("Prefers window seats", None), ("Hiked the ridge", event), ("Gone", None)]
        embed = HashingEmbeddings().embed_documents
        for i, ((text, at), vector) in enumerate(
            zip(texts, embed([t for t, _ in texts]), strict=True)
        ):
            memory = Memory(text=text, event_time=at)
            params = _sql.memory_params(memory, fingerprint(memory), vector, _language())
            conn.execute(
                _OLD_INSERT,
                {**params, **_sql.user_params(ALICE), "id": f"m{i}", "created": T0, "keyed": False},
            )
        conn.execute("UPDATE langmem_memories SET deleted_at = %s WHERE id = 'm2'", (T0,))
    with PostgresMemoryService(pg_url, HashingEmbeddings(), exact_search_max=0) as svc:
        svc.setup()
        rows = {e.id: e for e in svc.read(ALICE)}
        assert {i: (e.valid_from, e.valid_to, e.superseded_by) for i, e in rows.items()} == {
            "m0": (T0, None, None),
            "m1": (event, None, None),
        }
        assert svc.count(ALICE) == 2 and svc.users() == [ALICE]
        for _ in range(2):  # the second search reads the HNSW index through the function
            assert svc.search(ALICE, "window seats")[0].id == "m0"
        gone = _find(svc, steps.FindById(ALICE, "m2"))
        assert gone.deleted and gone.entry.valid_from == T0
    with psycopg.connect(pg_url, autocommit=True) as conn:
        indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes").fetchall()}
        functions = conn.execute(
            "SELECT count(*) FROM pg_proc WHERE proname = 'langmem_ann_candidates'"
        ).fetchone()
        stats = conn.execute("SELECT live_count, current_count FROM langmem_user_stats").fetchall()
    assert "langmem_memories_current_fingerprint" in indexes
    assert "langmem_memories_live_fingerprint" not in indexes
    assert functions == (1,) and stats == [(2, 2)]


def _language():
    from langmem_trpc.service.language import ENGLISH

    return ENGLISH


_OLD_INSERT = """
INSERT INTO langmem_memories (
    app_name, user_id, id, text, fingerprint, keyed, topics, kind, event_time, participants,
    location, metadata, embedding, content_terms, topic_terms, content_len, topic_len,
    content_doc, topic_doc, created_at, updated_at)
VALUES (
    %(app)s, %(user)s, %(id)s, %(text)s, %(fp)s, %(keyed)s, %(topics)s, %(kind)s, %(event_time)s,
    %(participants)s, %(location)s, %(metadata)s, %(embedding)b::vector, %(content_terms)s,
    %(topic_terms)s, %(content_len)s, %(topic_len)s, %(content_doc)s, %(topic_doc)s, %(created)s,
    %(created)s)"""
"""The row insert of the release before validity."""
