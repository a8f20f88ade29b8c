"""Existing memories for a multi-turn delta: found for every turn, on every backend, with and without embeddings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from langmem_trpc import AutoMemoryWorker, InMemoryMemoryService, LLMExtractor, UserKey
from langmem_trpc.extraction.existing import (
    MAX_EXISTING,
    MAX_QUERIES,
    PIECE_WORDS,
    existing_queries,
    load_existing,
    merge_ranked,
)
from langmem_trpc.service.protocol import MemoryService
from langmem_trpc.testing import HashingEmbeddings, ScriptedChatModel, tool_call

USER = UserKey("app", "existing")

DELTA = [
    HumanMessage("I had a great weekend, the weather was lovely.", id="h1"),
    AIMessage("Glad to hear it!", id="a1"),
    HumanMessage(
        "We went to the beach with the kids and had ice cream, then visited grandma.", id="h2"
    ),
    AIMessage("Sounds lovely.", id="a2"),
    HumanMessage("Also, we upgraded production to Go 1.24 on Friday.", id="h3"),
]


@pytest.fixture(
    params=[
        ("memory", False),
        ("memory", True),
        ("sqlite", False),
        ("sqlite", True),
        pytest.param(("postgres", False), marks=pytest.mark.postgres),
        pytest.param(("postgres", True), marks=pytest.mark.postgres),
    ],
    ids=lambda p: f"{p[0]}-{'vectors' if p[1] else 'keywords'}",
)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryService]:
    kind, vectors = request.param
    embeddings = HashingEmbeddings() if vectors else None
    svc: MemoryService
    if kind == "memory":
        svc = InMemoryMemoryService(embeddings=embeddings)
    elif kind == "sqlite":
        from langmem_trpc.backends.sqlite import SQLiteMemoryService

        svc = SQLiteMemoryService(str(tmp_path / "m.db"), embeddings=embeddings)
    else:
        from langmem_trpc.backends.postgres import PostgresMemoryService

        url = request.getfixturevalue("pg_url")
        svc = PostgresMemoryService(url, embeddings, pool_size=2)
        svc.setup()  # type: ignore[attr-defined]
    yield svc
    svc.close()


def _fill(service: MemoryService, count: int = MAX_EXISTING + 5) -> None:
    for i in range(count):
        service.add(USER, f"Collects stamp series {i} from country{i}", topics=[f"stamps{i}"])


def test_every_turn_of_a_multi_turn_delta_finds_its_existing_memory(backend: MemoryService):
    _fill(backend)
    go = backend.add(USER, "Production runs Go 1.23", topics=["production", "go"])
    beach = backend.add(USER, "Went to the beach with the kids", topics=["beach", "kids"])
    backend.add(USER, "Allergic to peanuts", topics=["allergy"])
    found = load_existing(backend, USER, existing_queries(DELTA, "merge_similar"))
    ids = [e.id for e in found]
    assert go.id in ids and beach.id in ids
    assert len(ids) == len(set(ids))


def test_the_extractor_sees_the_memory_of_the_last_turn_and_updates_it(backend: MemoryService):
    _fill(backend)
    go = backend.add(USER, "Production runs Go 1.23", topics=["production", "go"])

    def extraction(messages):
        system = str(messages[0].content)
        assert f'[{go.id}] "Production runs Go 1.23"' in system
        return AIMessage(
            "",
            tool_calls=[
                tool_call(
                    "memory_update",
                    {"memory_id": go.id, "memory": "Production runs Go 1.24"},
                )
            ],
        )

    worker = AutoMemoryWorker(backend, LLMExtractor(ScriptedChatModel(default=extraction)))
    report = worker.process(USER, "t", DELTA)
    assert report.error is None and report.updated == 1
    assert [e.text for e in backend.read(USER) if "Go" in e.text] == ["Production runs Go 1.24"]


def test_a_small_store_is_shown_whole_without_searching(backend: MemoryService):
    go = backend.add(USER, "Production runs Go 1.23")
    assert [e.id for e in load_existing(backend, USER, ["We moved to Go 1.24"])] == [go.id]


def test_queries_are_per_turn_and_long_turns_come_per_sentence():
    sentences = [f"We talked about topic{i} for hours." for i in range(6)]
    long_turn = " ".join(["Yes.", *sentences, " ".join(f"w{i}" for i in range(30))])
    queries = existing_queries(
        [HumanMessage("short one"), AIMessage("reply"), HumanMessage(long_turn)], "merge_similar"
    )
    assert queries[0] == "short one" and "reply" not in queries
    assert queries[1] == "Yes. " + sentences[0] and queries[2:7] == sentences[1:]
    assert all(len(q.split()) <= PIECE_WORDS for q in queries) and len(queries) == 1 + 6 + 2
    every = existing_queries([HumanMessage("a b"), AIMessage("c d")], "preserve_history")
    assert every == ["a b", "c d"]


def test_many_turns_each_keep_their_first_query_within_the_bound():
    long_turns = [
        HumanMessage(" ".join(f"Turn {t} sentence {i} is here." for i in range(10)))
        for t in range(MAX_QUERIES)
    ]
    queries = existing_queries(long_turns, "merge_similar")
    assert len(queries) == MAX_QUERIES
    assert [q.split()[1] for q in queries] == [str(t) for t in range(MAX_QUERIES)]


def test_merge_is_round_robin_deduplicated_and_bounded():
    svc = InMemoryMemoryService()
    entries = [svc.add(USER, f"fact number {i}") for i in range(40)]
    first, second = entries[:25], [entries[0], *entries[25:]]
    merged = merge_ranked([first, second])
    assert [e.id for e in merged[:4]] == [first[0].id, first[1].id, second[1].id, first[2].id]
    assert len(merged) == MAX_EXISTING and len({e.id for e in merged}) == MAX_EXISTING


def test_a_long_single_turn_finds_the_memory_one_sentence_is_about(backend: MemoryService):
    _fill(backend)
    go = backend.add(USER, "Production runs Go 1.23", topics=["production", "go"])
    chatter = " ".join(f"Then we talked about topic{i} for a while." for i in range(12))
    turn = HumanMessage(f"{chatter} By the way, production now runs Go 1.24. {chatter}")
    found = load_existing(backend, USER, existing_queries([turn], "merge_similar"))
    assert go.id in [e.id for e in found]
