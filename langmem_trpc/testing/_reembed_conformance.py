"""Conformance: a backend that re-embeds (`service.reembed.Reembeddable`) moves every
stored vector to the new model, keeps writes made during the run, and records the new
model so that the old one is refused.

Subclass `ReembedConformance` with the fixtures of `MemoryServiceConformance`:
`service` (a fresh store embedded with a 384-dimension `HashingEmbeddings`) and
`service_url` (the URL `langmem_trpc.open()` reopens it with). Every test is skipped
for a service that is not `Reembeddable` or has no embedder (docs/backends.md,
"Re-embedding").
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

import numpy as np
import pytest

from .. import registry
from ..errors import ConfigurationError
from ..service.capabilities import Capability
from ..service.protocol import MemoryService
from ..service.reembed import Reembeddable, ReembedProgress
from ..types import Entry, SearchOptions, UserKey
from ._embeddings import HashingEmbeddings
from ._kit import ALICE, BOB, Client

NEW = HashingEmbeddings(seed="conformance: the new model")
"""Another model of the fixture's dimension (384)."""
WIDE = HashingEmbeddings(size=768, seed="conformance: a wider model")
NARROW = HashingEmbeddings(seed="conformance: back to 384")
VECTOR_ONLY = SearchOptions(hybrid=False, similarity_threshold=0.0, max_results=5)
FACTS = [
    f"{who} {verb} {thing} on {day}"
    for who, verb, thing, day in zip(
        ["Alice", "Bob", "Carol", "Dan", "Erin", "Frank", "Grace", "Heidi"] * 3,
        ["likes", "bought", "visited", "painted", "cooked", "sold"] * 4,
        ["green tea", "a bicycle", "Paris", "the fence", "risotto", "old books", "a piano"] * 4,
        ["Monday", "Friday", "Sunday", "Tuesday", "Thursday"] * 5,
        strict=False,
    )
]


def _cosine(model: HashingEmbeddings, query: str, text: str) -> float:
    """A vector hit's score: `model`'s cosine of query and text, 0 when negative."""
    return max(0.0, float(np.dot(model.embed_query(query), model.embed_documents([text])[0])))


def _answers_like(model: HashingEmbeddings, hits: Sequence[Entry], query: str) -> None:
    """Every hit's score is `model`'s cosine of query and text (halfvec precision), and
    a stored text searched for is the first hit at cosine ~1: the old model's query
    over the new model's vectors (or the reverse) finds neither."""
    assert hits and hits[0].memory.text == query, [h.memory.text for h in hits[:3]]
    for hit in hits:
        assert hit.score == pytest.approx(_cosine(model, query, hit.memory.text), abs=2e-3)


def _all_answer_like(svc: MemoryService, model: HashingEmbeddings, user: UserKey) -> None:
    for entry in svc.read(user):
        _answers_like(model, svc.search(user, entry.text, VECTOR_ONLY), entry.text)


class ReembedConformance:
    """The re-embed rule every `Reembeddable` backend must keep. See the module docstring."""

    pytestmark = pytest.mark.asyncio

    @pytest.fixture(params=["sync", "async"])
    def client(self, request: pytest.FixtureRequest, service: MemoryService) -> Iterator[Client]:
        yield Client(service, request.param)
        service.close()

    @pytest.fixture
    def service_url(self) -> str | None:
        """The URL of the `service` fixture's store (None: the reopen tests fail)."""
        return None

    @staticmethod
    def need(client: Client) -> None:
        """Skip unless the service can re-embed and has an embedder to replace."""
        if not isinstance(client.service, Reembeddable):
            pytest.skip(f"{type(client.service).__name__} is not Reembeddable")
        if Capability.VECTORS not in client.service.capabilities:
            pytest.skip(f"{type(client.service).__name__} has no embedder")

    @staticmethod
    async def refused(client: Client, url: str | None, model: HashingEmbeddings) -> None:
        """Opening the store with `model` raises `ConfigurationError` naming the way out."""
        assert url is not None, "the test class must provide a `service_url` fixture"
        with pytest.raises(ConfigurationError, match="reembed"):
            if client.mode == "async":
                await registry.aopen(url, embeddings=model)
            else:
                registry.open(url, embeddings=model)

    async def test_a_same_dimension_model_is_refused_until_a_reembed_moves_to_it(
        self, client: Client, service_url: str | None
    ) -> None:
        self.need(client)
        await client.add(ALICE, FACTS[0])
        await self.refused(client, service_url, NEW)
        report = await client.reembed(NEW)
        assert report.cut_over and report.embedded == 1
        await self.refused(client, service_url, HashingEmbeddings())
        assert service_url is not None
        with registry.open(service_url, embeddings=NEW) as reopened:
            _all_answer_like(reopened, NEW, ALICE)

    async def test_after_a_reembed_every_vector_answers_like_the_new_model(
        self, client: Client
    ) -> None:
        self.need(client)
        await client.add_many(ALICE, FACTS[:12])
        await client.add_many(BOB, FACTS[12:])
        before = {u: sorted(e.id for e in await client.read(u)) for u in (ALICE, BOB)}
        report = await client.reembed(NEW, batch_size=5)
        assert report.cut_over and report.embedded == len(FACTS) and report.resumed == 0
        for user in (ALICE, BOB):
            assert sorted(e.id for e in await client.read(user)) == before[user]
            _all_answer_like(client.service, NEW, user)
            hits = await client.search(user, "who likes green tea on Monday", VECTOR_ONLY)
            for hit in hits:
                want = _cosine(NEW, "who likes green tea on Monday", hit.memory.text)
                assert hit.score == pytest.approx(want, abs=2e-3)
        again = await client.reembed(NEW)
        assert not again.cut_over and again.embedded == 0  # already on the new model

    async def test_writes_during_a_reembed_end_on_the_new_model(self, client: Client) -> None:
        """Another thread writes, with the old model, while the shadow is half filled."""
        self.need(client)
        await client.add_many(ALICE, FACTS)
        written: list[str] = []

        def writing() -> None:
            for fruit in ("apricots", "walnuts", "saffron"):
                client.service.add(BOB, f"Bob ordered {fruit} during the re-embed")
                written.append(f"Bob ordered {fruit} during the re-embed")

        def after_the_first_batch(progress: ReembedProgress) -> None:
            if progress.embedded < len(FACTS) and not written:
                writer = threading.Thread(target=writing)
                writer.start()
                writer.join(timeout=60)

        report = await client.reembed(NEW, batch_size=4, progress=after_the_first_batch)
        assert report.cut_over and len(written) == 3
        assert {e.text for e in await client.read(BOB)} == set(written)
        for user in (ALICE, BOB):
            _all_answer_like(client.service, NEW, user)

    async def test_soft_deleted_memories_are_reembedded_too(self, client: Client) -> None:
        self.need(client)
        added = await client.add_many(ALICE, FACTS[:6])
        gone = added[2].id
        assert await client.delete(ALICE, gone)
        report = await client.reembed(NEW)
        assert report.cut_over and report.embedded == 6
        restored = await client.undelete(ALICE, gone)
        hits = await client.search(ALICE, restored.text, VECTOR_ONLY)
        _answers_like(NEW, hits, restored.text)
        _all_answer_like(client.service, NEW, ALICE)

    async def test_the_dimension_changes_and_changes_back(
        self, client: Client, service_url: str | None
    ) -> None:
        self.need(client)
        await client.add_many(ALICE, FACTS[:8])
        await client.delete(ALICE, (await client.read(ALICE))[0].id)
        for generation, model in enumerate([WIDE, NARROW], start=1):
            report = await client.reembed(model, batch_size=3)
            assert report.cut_over and report.embedded == 8
            assert report.generation == generation
            _all_answer_like(client.service, model, ALICE)
            await self.refused(client, service_url, WIDE if model is NARROW else NEW)
        await client.add(ALICE, "Written after the round trip")
        _all_answer_like(client.service, NARROW, ALICE)
