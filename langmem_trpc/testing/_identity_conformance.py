"""Conformance: a durable store records its embedder and refuses another one."""

from __future__ import annotations

import pytest

from .. import registry
from ..errors import ConfigurationError
from ..service.capabilities import Capability
from ._embeddings import HashingEmbeddings
from ._kit import ALICE, Client
from ._lifecycle_conformance import LifecycleConformance, _needs_url


class IdentityConformance:
    async def test_a_durable_store_refuses_an_embedder_that_did_not_make_its_vectors(
        self, client: Client, service_url: str | None
    ) -> None:
        """Another model of any dimension raises `ConfigurationError` at open (its message
        names both); opening without an embedder stays allowed (docs/backends.md)."""
        url = _needs_url(client, service_url, Capability.DURABLE)
        LifecycleConformance.need(client, Capability.VECTORS)
        await client.add(ALICE, "Embedded by the fixture's model")
        await client.close()  # a one-service store (LanceDB) lets the next one open
        others = [
            HashingEmbeddings(seed="conformance: another model"),
            HashingEmbeddings(size=24, seed="conformance: another width"),
        ]
        for other in others:
            with pytest.raises(ConfigurationError, match="embeddings"):
                if client.mode == "async":
                    await registry.aopen(url, embeddings=other)
                else:
                    registry.open(url, embeddings=other)
        with registry.open(url) as keyword_only:
            assert keyword_only.count(ALICE) == 1
