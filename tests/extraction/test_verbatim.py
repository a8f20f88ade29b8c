"""VerbatimExtractor: one episode per turn, with the previous turn as keyword context."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage

from langmem_trpc import InMemoryMemoryService, Kind, UserKey
from langmem_trpc.extraction.extractor import (
    CONTEXT_TOPICS,
    ExtractionRequest,
    VerbatimExtractor,
    context_topics,
)

USER = UserKey("app", "alice")


def _request(*messages):
    return ExtractionRequest(USER, "t", list(messages))


def test_context_topics_hold_speaker_and_previous_words():
    topics = context_topics("Mel", "Caroline: I painted a sunset, a sunset!", "Caroline")
    assert topics[:2] == ["Mel", "Caroline"]
    assert "painted" in topics and "sunset" in topics
    assert topics.count("sunset") == 1, "distinct words: repeats would weigh twice"
    assert context_topics(None, None, None) == []
    long = " ".join(f"word{i}" for i in range(200))
    assert len(context_topics("a", long, "b")) == CONTEXT_TOPICS


def test_each_user_turn_carries_the_previous_message_as_topics():
    ops = VerbatimExtractor().extract(
        _request(
            HumanMessage("I adopted a puppy named Biscuit", name="Ann"),
            AIMessage("What breed is Biscuit?"),
            HumanMessage("A beagle", name="Ann"),
        )
    )
    assert [op.text for op in ops] == ["I adopted a puppy named Biscuit", "A beagle"]
    assert ops[0].topics == ("Ann",)
    assert "breed" in ops[1].topics and "biscuit" in ops[1].topics
    assert all(op.kind == Kind.EPISODE and op.participants == ("Ann",) for op in ops)


def test_context_off_keeps_topics_empty():
    ops = VerbatimExtractor(context=False).extract(
        _request(AIMessage("What breed?"), HumanMessage("A beagle"))
    )
    assert [op.topics for op in ops] == [()]


def test_context_finds_a_reply_by_what_it_answered():
    """Keyword search for the previous turn's words finds the short reply (text unchanged)."""
    service = InMemoryMemoryService()
    ops = VerbatimExtractor().extract(
        _request(
            AIMessage("Which instrument does your sister play?"),
            HumanMessage("The cello, since she was six", name="Ann"),
            HumanMessage("I went hiking on Sunday", name="Ann"),
        )
    )
    for op in ops:
        service.add(USER, op.text, kind=op.kind, topics=list(op.topics))
    hits = service.search(USER, "sister instrument")
    assert hits and hits[0].text == "The cello, since she was six"


def test_a_turn_after_a_long_url_is_still_stored():
    """A word of the previous turn over the topic length limit (a long URL) is no topic:
    it used to fail the next turn's memory with "topics: item longer than 128 characters"."""
    svc = InMemoryMemoryService()
    url = "https://example.com/" + "a" * 150
    ops = VerbatimExtractor().extract(
        _request(HumanMessage(f"see {url}", name="Ann"), HumanMessage("and the beagle", name="Ann"))
    )
    for op in ops:
        svc.add(USER, op.text, topics=op.topics)
    assert sorted(e.text for e in svc.read(USER)) == ["and the beagle", f"see {url}"]
