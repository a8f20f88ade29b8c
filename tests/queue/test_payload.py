"""`JobPayload.chunked_json` without a database: it always ends, under the cap or refused."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from langmem_trpc.errors import QueuePayloadTooLargeError
from langmem_trpc.queue._payload import JobPayload
from langmem_trpc.types import UserKey

USER = UserKey("app", "alice")
CAP = 2_000


def payload(*messages: HumanMessage | AIMessage) -> JobPayload:
    return JobPayload(USER, "t", tuple(messages))


@pytest.mark.timeout(10)
def test_a_message_over_the_cap_after_one_anchor_ends() -> None:
    """Every turn after the first: one anchor, then a message over the cap (looped forever)."""
    job = payload(AIMessage("hello", id="a0"), HumanMessage("x" * 3 * CAP, id="big"))
    with pytest.raises(QueuePayloadTooLargeError) as info:
        job.chunked_json(CAP)
    assert info.value.cap == CAP and info.value.size > 3 * CAP


@pytest.mark.timeout(10)
def test_two_messages_that_fit_alone_but_not_together_end() -> None:
    half = "y" * (CAP // 2 + 100)
    job = payload(HumanMessage(half, id="m0"), HumanMessage(half, id="m1"))
    with pytest.raises(QueuePayloadTooLargeError):
        job.chunked_json(CAP)


def test_chunks_stay_under_the_cap_and_chain() -> None:
    job = payload(*(HumanMessage(f"fact {i} " + "pad " * 40, id=f"m{i}") for i in range(30)))
    texts = job.chunked_json(CAP)
    assert len(texts) > 2 and all(len(t.encode()) <= CAP for t in texts)
    chunks = [[m["data"]["id"] for m in json.loads(t)["messages"]] for t in texts]
    assert chunks[0][0] == "m0" and chunks[-1][-1] == "m29"
    assert all(after[0] == before[-1] for before, after in zip(chunks, chunks[1:], strict=False))
