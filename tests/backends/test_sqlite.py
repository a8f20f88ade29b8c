from __future__ import annotations

import pytest

from langmem_trpc.backends.sqlite import SQLiteMemoryService
from langmem_trpc.testing import HashingEmbeddings
from langmem_trpc.testing.conformance import Capability, MemoryServiceConformance


class TestSQLiteWithEmbeddings(MemoryServiceConformance):
    @pytest.fixture
    def service(self, tmp_path):
        return SQLiteMemoryService(tmp_path / "m.db", HashingEmbeddings())

    @pytest.fixture
    def make_service(self, tmp_path):
        return lambda limits: SQLiteMemoryService(
            tmp_path / "limited.db", HashingEmbeddings(), limits=limits
        )


class TestSQLiteKeywordOnly(MemoryServiceConformance):
    capabilities = frozenset[Capability]()

    @pytest.fixture
    def service(self, tmp_path):
        return SQLiteMemoryService(tmp_path / "m.db")

    @pytest.fixture
    def make_service(self, tmp_path):
        return lambda limits: SQLiteMemoryService(tmp_path / "limited.db", limits=limits)
