"""SQLite's read executor (`backends/sqlite/_reads.py`): the shared read plans, each
read in one snapshot (issue 25)."""

from __future__ import annotations

import asyncio
import inspect
import sqlite3

import pytest

from langmem_trpc import SearchOptions, UserKey
from langmem_trpc.backends.sqlite import SQLiteMemoryService
from langmem_trpc.backends.sqlite._reads import SQLiteReads
from langmem_trpc.service import reads
from langmem_trpc.service.reads import ReadExecutor
from langmem_trpc.testing import HashingEmbeddings
from langmem_trpc.types import FusionSettings
from tests._plans import writing_between_tiers

ALICE = UserKey("app", "alice")


def test_the_executor_implements_every_read_step():
    """One method per `ReadExecutor` step, with the protocol's parameters and result."""
    wanted = {
        name: method
        for name, method in inspect.getmembers(ReadExecutor, inspect.isfunction)
        if not name.startswith("_")
    }
    assert set(wanted) == {
        "get_row",
        "read_rows",
        "read_history",
        "count_current",
        "list_users",
        "embed_query",
        "fetch_legs",
    }
    for name, method in wanted.items():
        own = getattr(SQLiteReads, name, None)
        assert own is not None, name
        assert list(inspect.signature(own).parameters) == list(
            inspect.signature(method).parameters
        ), name
        step = inspect.signature(method).parameters["step"].annotation
        assert inspect.signature(own).parameters["step"].annotation == step, name


@pytest.mark.parametrize("embedded", [False, True], ids=["keyword", "hybrid"])
def test_one_search_reads_one_snapshot(tmp_path, embedded):
    """A write another connection commits between two tiers of a search is not seen by
    the deeper tier: every step after the first storage step reads the same snapshot."""
    make = lambda: SQLiteMemoryService(  # noqa: E731
        tmp_path / "m.db", HashingEmbeddings() if embedded else None
    )
    svc, other = make(), make()
    try:
        svc.add_many(ALICE, [f"alpha note number {i}" for i in range(4)])
        options = SearchOptions(
            query="alpha", max_results=10, hybrid=True, fusion=FusionSettings(min_pool=2)
        )
        plain = svc.search(ALICE, options=options)
        assert len(plain) == 4

        fetches = []

        def write() -> None:
            fetches.append(other.add_many(ALICE, [f"alpha later {i}" for i in range(3)]))

        plan = reads.search(ALICE, options, svc.language, svc.time_mentions)
        found = svc.run_read(writing_between_tiers(plan, write))
        assert fetches, "the search fetched a second tier"
        assert sorted(e.id for e in found) == sorted(e.id for e in plain)
        assert len(svc.search(ALICE, options=options)) == 7  # the write is there to see
    finally:
        svc.close()
        other.close()


def test_a_plan_without_storage_steps_opens_no_transaction(tmp_path):
    """A blank search ends before any step; an embedding runs outside a transaction."""
    svc = SQLiteMemoryService(tmp_path / "m.db", HashingEmbeddings())
    try:
        assert svc.run_read(reads.search(ALICE, SearchOptions(query="  "))) == []

        def embed_only() -> reads.ReadPlan:
            vector = yield reads.EmbedQuery("alpha")
            return svc._db.connection().in_transaction, vector

        in_transaction, vector = svc.run_read(embed_only())
        assert in_transaction is False
        assert vector is not None and abs(float((vector**2).sum()) - 1.0) < 1e-5
    finally:
        svc.close()


@pytest.mark.parametrize("run", ["sync", "async"])
def test_a_search_backfills_missing_vectors_then_reads_a_new_snapshot(tmp_path, run):
    """Memories written without an embedder get vectors at the first search that embeds
    its query, and that same search finds them by vector (its plan never saw the old
    snapshot), through `search` and `asearch` alike."""
    path = tmp_path / "m.db"
    plain = SQLiteMemoryService(path)
    plain.add_many(ALICE, ["Upgraded the database servers", "Bakes sourdough bread"])
    plain.close()
    svc = SQLiteMemoryService(path, HashingEmbeddings())
    try:
        options = SearchOptions(query="database upgrade", hybrid=False, similarity_threshold=0.2)
        if run == "sync":
            hits = svc.search(ALICE, options=options)
        else:
            hits = asyncio.run(svc.asearch(ALICE, options=options))
        assert [e.text for e in hits][:1] == ["Upgraded the database servers"]
        with sqlite3.connect(path) as conn:
            (missing,) = conn.execute(
                "SELECT count(*) FROM memories WHERE embedding IS NULL"
            ).fetchone()
        assert missing == 0
    finally:
        svc.close()
