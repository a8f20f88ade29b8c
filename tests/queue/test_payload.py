"""`JobPayload.split` without a database: it always ends, every job under the cap, and a
message too big for a job becomes a placeholder that keeps its cursor key."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langmem_trpc.errors import QueuePayloadTooLargeError
from langmem_trpc.extraction.delta import is_memorable, message_keys
from langmem_trpc.queue._payload import MIN_PAYLOAD_BYTES, JobPayload, decode
from langmem_trpc.types import UserKey

USER = UserKey("app", "alice")
CAP = MIN_PAYLOAD_BYTES


def payload(*messages: BaseMessage, anchored: bool = False) -> JobPayload:
    return JobPayload(USER, "t", tuple(messages), anchored=anchored)


def decoded(texts: list[str]) -> list[list[BaseMessage]]:
    return [list(decode(json.loads(t)).messages) for t in texts]


@pytest.mark.timeout(10)
def test_a_message_over_the_cap_after_one_anchor_ends_as_a_placeholder() -> None:
    """Every turn after the first: one anchor, then a message over the cap (looped forever)."""
    job = payload(AIMessage("hello", id="a0"), HumanMessage("x" * 3 * CAP, id="big"))
    chunks = job.split(CAP)
    assert [o.message_id for o in chunks.omitted] == ["big"]
    assert chunks.omitted[0].index == 1 and chunks.omitted[0].size > 3 * CAP
    (messages,) = decoded(chunks.texts)
    assert [m.id for m in messages] == ["a0", "big"]
    assert messages[1].type == "chat" and not is_memorable(messages[1])
    assert message_keys(messages) == message_keys(job.messages)  # the cursor covers the real one


@pytest.mark.timeout(10)
def test_two_messages_that_fit_alone_but_not_together_are_two_jobs() -> None:
    half = "y" * (CAP // 2 + 100)
    job = payload(HumanMessage(half, id="m0"), HumanMessage(half, id="m1"))
    chunks = job.split(CAP)
    assert chunks.omitted == ()
    first, second = decoded(chunks.texts)
    assert [m.content for m in first] == [half]
    assert [m.id for m in second] == ["m0", "m1"] and second[1].content == half
    assert second[0].type == "chat"  # the anchor travels as its placeholder: it was carried
    assert all(len(t.encode()) <= CAP for t in chunks.texts)


def test_an_anchor_over_the_cap_is_not_reported_as_omitted() -> None:
    """The anchor was extracted (or reported) by an earlier job: only its key matters."""
    job = payload(HumanMessage("x" * 2 * CAP, id="old"), HumanMessage("new", id="n"), anchored=True)
    chunks = job.split(CAP)
    assert chunks.omitted == () and len(chunks.texts) == 1
    (messages,) = decoded(chunks.texts)
    assert message_keys(messages) == message_keys(job.messages)


def test_chunks_stay_under_the_cap_and_chain() -> None:
    job = payload(*(HumanMessage(f"fact {i} " + "pad " * 1500, id=f"m{i}") for i in range(30)))
    texts = job.chunked_json(CAP)
    assert len(texts) > 2 and all(len(t.encode()) <= CAP for t in texts)
    chunks = [[m.id for m in c] for c in decoded(texts)]
    assert chunks[0][0] == "m0" and chunks[-1][-1] == "m29"
    assert all(after[0] == before[-1] for before, after in zip(chunks, chunks[1:], strict=False))


def test_a_cap_too_small_for_the_placeholders_is_refused_not_looped() -> None:
    job = payload(HumanMessage("a" * 5000, id="m" * 500), HumanMessage("b" * 5000, id="n" * 500))
    with pytest.raises(QueuePayloadTooLargeError):
        job.split(1000)
