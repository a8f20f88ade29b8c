"""Conformance for the lifecycle (setup, close, context managers) and for the
declared capabilities that need more than one service on a store (mixed into
`MemoryServiceConformance`, so every backend runs them, sync and async)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .. import registry
from ..service.capabilities import Capability
from ..service.rules import Limits
from ._kit import ALICE

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..service.protocol import MemoryService
    from ._kit import Client


_CHILD = """
import sys
import langmem_trpc
from langmem_trpc import UserKey

alice = UserKey("app", "alice")
with langmem_trpc.open(sys.argv[1]) as service:
    service.add(alice, "Written by another process about kayaks")
    claim = service.claim_thread(alice, "t-cross", "child", 60.0)
    print("claimed" if claim is not None else "busy", flush=True)
    sys.stdin.readline()  # hold the claim until the parent has looked
"""


def _needs_url(client: Client, url: str | None, capability: Capability) -> str:
    """Skip unless the service declares `capability`; then its `service_url` is required."""
    LifecycleConformance.need(client, capability)
    if url is None:
        pytest.fail(
            f"{type(client.service).__name__} declares {capability.value}: the test class "
            "must provide a `service_url` fixture (the URL of the `service` fixture's store)"
        )
    return url


def _start_child(url: str) -> subprocess.Popen[str]:
    """The second process, importing this same `langmem_trpc` (the folder above it)."""
    package_root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
    )


class LifecycleConformance:
    @staticmethod
    def need(client: Client, capability: Capability) -> None:
        """Skip the test unless the service declares `capability`."""
        if capability not in client.service.capabilities:
            pytest.skip(f"{type(client.service).__name__} does not declare {capability.value}")

    async def test_setup_is_idempotent_and_keeps_the_data(self, client: Client) -> None:
        kept = await client.add(ALICE, "Kept across setup")
        await client.setup()
        await client.setup()
        assert (await client.get(ALICE, kept.id)).text == "Kept across setup"

    async def test_close_is_idempotent(self, client: Client) -> None:
        await client.add(ALICE, "Written before close")
        await client.close()
        await client.close()  # and the fixture closes it once more

    async def test_context_managers_return_the_service(
        self, client: Client, make_service: Callable[[Limits], MemoryService]
    ) -> None:
        made = make_service(Limits())
        if client.mode == "async":
            async with made as entered:
                assert entered is made
                await entered.aadd(ALICE, "Inside async with")
        else:
            with made as entered:
                assert entered is made
                entered.add(ALICE, "Inside with")
        made.close()  # closing again is harmless

    async def test_supports_vectors_follows_the_capability(self, client: Client) -> None:
        declared = client.service.capabilities
        assert all(isinstance(c, Capability) for c in declared)
        assert client.service.supports_vectors is (Capability.VECTORS in declared)

    async def test_durable_store_is_seen_by_a_new_service(
        self, client: Client, service_url: str | None
    ) -> None:
        url = _needs_url(client, service_url, Capability.DURABLE)
        written = await client.add(ALICE, "Survives a new service", topics=["durable"])
        if client.mode == "async":
            reopened = await registry.aopen(url)
            try:
                assert (await reopened.aget(ALICE, written.id)) == written
            finally:
                await reopened.aclose()
        else:
            with registry.open(url) as again:
                assert again.get(ALICE, written.id) == written

    async def test_another_process_sees_writes_and_claims(
        self, client: Client, service_url: str | None
    ) -> None:
        """A second process on the same store: each sees the other's memories, and
        a thread claim held there excludes this process."""
        url = _needs_url(client, service_url, Capability.CROSS_PROCESS)
        await client.add(ALICE, "Written by this process")
        child = await asyncio.to_thread(_start_child, url)
        assert child.stdout is not None and child.stdin is not None
        try:
            said = await asyncio.to_thread(child.stdout.readline)
            assert said.strip() == "claimed", "the other process could not open the store"
            assert await client.claim_thread(ALICE, "t-cross", "parent", 60.0) is None
            texts = {e.text for e in await client.read(ALICE)}
            assert texts == {"Written by this process", "Written by another process about kayaks"}
            hits = await client.search(ALICE, "kayaks")
            assert [e.text for e in hits] == ["Written by another process about kayaks"]
        finally:
            child.stdin.close()
            assert await asyncio.to_thread(child.wait, 60) == 0

    async def test_deferred_writes_are_found_before_and_after_the_index_step(
        self, client: Client
    ) -> None:
        self.need(client, Capability.DEFERRED_INDEXING)
        texts = [f"Paddled the {river} river by kayak" for river in ("Tay", "Spey", "Dee")]
        for text in texts:
            await client.add(ALICE, text)
        await client.add(ALICE, "Bakes sourdough bread")
        before = [(e.id, e.score) for e in await client.search(ALICE, "kayak river")]
        assert len(before) == 3
        assert await client.index_pending() >= 0
        after = [(e.id, e.score) for e in await client.search(ALICE, "kayak river")]
        assert after == before
        assert await client.index_pending() == 0
