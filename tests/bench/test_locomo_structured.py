"""The `structured-default` arm's units (issue 29): turns as the extractor writes memories,
derived deterministically, and the report's published baselines."""

from __future__ import annotations

from benchmarks.locomo.loader import load_locomo
from benchmarks.locomo.report import PUBLISHED, markdown_tables
from benchmarks.locomo.retrieval import RetrievalArm, default_arms, run_retrieval
from benchmarks.locomo.structured import place_gazetteer
from benchmarks.locomo.units import conversation_units, ingest_units
from langmem_trpc import InMemoryMemoryService, Kind, UserKey
from langmem_trpc.testing import HashingEmbeddings


def test_structured_units_move_names_and_places_into_fields(sample_path):
    (conv,) = load_locomo(sample_path).conversations
    assert place_gazetteer(conv) == ["Boston"]  # "in Boston"; speakers and months are not places
    units = {u.dia_ids[0]: u for u in conversation_units(conv, "structured")}
    marathon = units["D2:1"]
    assert marathon.text == "I ran my first marathon in."
    assert marathon.location == "Boston" and marathon.participants == ("Bob",)
    assert marathon.kind is Kind.EPISODE and marathon.event_time == conv.turns[3].date
    reply = units["D2:2"]
    assert reply.participants == ("Ann",) and "marathon" in reply.topics
    assert not {"Ann", "Bob", "ann", "bob"} & set(reply.topics)
    assert conversation_units(conv, "structured") == conversation_units(conv, "structured")


def test_structured_units_are_found_by_their_fields(sample_path):
    """Ingested, the marathon turn is found by its place though its text lost it."""
    (conv,) = load_locomo(sample_path).conversations
    service = InMemoryMemoryService(HashingEmbeddings())
    user = UserKey("bench", "conv-x")
    ids = ingest_units(service, user, conversation_units(conv, "structured"))
    hits = service.search(user, "Who ran in Boston?")
    assert hits and ids[hits[0].id] == ("D2:1",)


def test_the_report_prints_the_published_baselines_beside_the_arms(sample_path, tmp_path):
    convs = load_locomo(sample_path).conversations
    arm = next(a for a in default_arms() if a.name == "structured-default")
    assert arm.units == "structured" and arm.embed and not arm.options
    arms = [arm, RetrievalArm("turns-hash", "turns", True, {})]
    results = run_retrieval(convs, arms, InMemoryMemoryService, HashingEmbeddings(), tmp_path)
    table = markdown_tables({"arms": results})
    for name in PUBLISHED:
        assert name in table
    assert "| 0.604 | 0.696 | - | 0.797 | - |" in table
    assert "| structured-default | " in table and "R@50" in table
