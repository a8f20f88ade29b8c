"""A hybrid search's first-tier steps on every backend, sync and async.

`FusionSettings.mask_names`: a query naming a participant is embedded without the
name, so the memory that answers it outranks the one that only greets the person by
name. `period_fetch`: a query naming a dated period also fetches the candidates within
it, so the period's memory is ranked even when the rest of the question prefers others."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from langchain_core.embeddings import Embeddings

from langmem_trpc import InMemoryMemoryService, SearchOptions, UserKey
from langmem_trpc.service.protocol import MemoryService
from langmem_trpc.testing import HashingEmbeddings
from langmem_trpc.types import FusionSettings

ALICE = UserKey("app", "alice")
BACKENDS = ["memory", "sqlite", "lancedb", pytest.param("postgres", marks=pytest.mark.postgres)]
ANSWER = "Finished a canvas of the lake at dawn"
GREETING = "Hey Caroline, good to see you"
QUESTION = "What did Caroline paint?"


class Axes(Embeddings):
    """Three axes: greetings and the name, painting, anything else (a little)."""

    AXES = {"hey": 0, "good": 0, "see": 0, "caroline": 0, "paint": 1, "canvas": 1, "lake": 1}

    def _embed(self, text: str) -> list[float]:
        vector = [0.0, 0.0, 0.1]
        for word in re.findall(r"\w+", text.lower()):
            if word in self.AXES:
                vector[self.AXES[word]] += 1.0
        return vector

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._embed(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._embed(text)


def _service(
    kind: str, path: Path, request: pytest.FixtureRequest, embeddings: Embeddings
) -> MemoryService:
    if kind == "memory":
        return InMemoryMemoryService(embeddings)
    if kind == "sqlite":
        from langmem_trpc.backends.sqlite import SQLiteMemoryService

        return SQLiteMemoryService(path / "m.db", embeddings)
    if kind == "lancedb":
        from langmem_trpc.backends.lancedb import LanceDBMemoryService

        return LanceDBMemoryService(path / "lance", embeddings)
    from langmem_trpc.backends.postgres import PostgresMemoryService

    url = request.getfixturevalue("pg_server").create_database("first-tier")
    svc = PostgresMemoryService(url, embeddings)
    svc.setup()
    return svc


def _texts(svc: MemoryService, mode: str, query: str, options: SearchOptions) -> list[str]:
    if mode == "sync":
        return [e.text for e in svc.search(ALICE, query, options)]
    return [e.text for e in asyncio.run(svc.asearch(ALICE, query, options))]


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("kind", BACKENDS)
def test_a_named_participant_does_not_pull_the_greeting_first(
    kind: str, mode: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    svc = _service(kind, tmp_path, request, Axes())
    svc.add(ALICE, ANSWER, participants=["Caroline"])
    svc.add(ALICE, GREETING, participants=["Melanie", "Caroline"])

    def texts(fusion: FusionSettings) -> list[str]:
        return _texts(svc, mode, QUESTION, SearchOptions(max_results=2, fusion=fusion))

    try:
        assert texts(FusionSettings(mask_names=True)) == [ANSWER, GREETING]
        assert texts(FusionSettings(mask_names=False)) == [GREETING, ANSWER]
        # a vector-only search keeps the name: the masked step is hybrid's
        vector_only = SearchOptions(hybrid=False, similarity_threshold=0.0, max_results=2)
        hits = svc.search(ALICE, QUESTION, vector_only)
        assert hits[0].score == pytest.approx(hits[1].score, abs=0.01)  # name = "paint"
    finally:
        svc.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("kind", BACKENDS)
def test_the_named_periods_memory_is_fetched_beyond_the_pool(
    kind: str, mode: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    svc = _service(kind, tmp_path, request, HashingEmbeddings())
    for month in (1, 2, 3, 4):
        when = f"2023-{month:02d}-10"
        svc.add(ALICE, f"Ann hiked outdoors on ridge {month}", event_time=when)
    svc.add(ALICE, "Went outdoors to swim", event_time="2023-05-14")
    question = "What did Ann do outdoors in May 2023?"

    def texts(period_fetch: bool) -> list[str]:
        fusion = FusionSettings(min_pool=2, period_fetch=period_fetch)
        return _texts(svc, mode, question, SearchOptions(max_results=2, fusion=fusion))

    try:
        assert "Went outdoors to swim" not in texts(period_fetch=False)
        assert texts(period_fetch=True)[0] == "Went outdoors to swim"
    finally:
        svc.close()
