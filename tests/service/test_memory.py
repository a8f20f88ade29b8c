from __future__ import annotations

import pytest

from langmem_trpc import InMemoryMemoryService, Limits
from langmem_trpc.testing import HashingEmbeddings
from langmem_trpc.testing.conformance import MemoryServiceConformance


class TestInMemoryWithEmbeddings(MemoryServiceConformance):
    @pytest.fixture
    def service(self):
        return InMemoryMemoryService(HashingEmbeddings())

    @pytest.fixture
    def make_service(self):
        return lambda limits: InMemoryMemoryService(HashingEmbeddings(), limits=limits)


class TestInMemoryKeywordOnly(MemoryServiceConformance):
    @pytest.fixture
    def service(self):
        return InMemoryMemoryService()

    @pytest.fixture
    def make_service(self):
        return lambda limits: InMemoryMemoryService(limits=limits)


def test_limits_reject_bad_settings():
    from langmem_trpc import ConfigurationError

    with pytest.raises(ConfigurationError):
        Limits(capacity=0)
    with pytest.raises(ConfigurationError):
        Limits(on_capacity="drop")  # type: ignore[arg-type]
