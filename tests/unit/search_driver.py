"""`execute_search` for ranking tests: the shared `reads.search` plan driven with a
scripted fetch, so a test hands legs straight to the ranking without a backend."""

from __future__ import annotations

from collections.abc import Callable

from langmem_trpc.service import reads
from langmem_trpc.service.language import ENGLISH, Language
from langmem_trpc.service.search import Legs
from langmem_trpc.service.steps import drive
from langmem_trpc.types import Entry, Kind, SearchOptions, UserKey

USER = UserKey("app", "ranking-test")


def execute_search(
    options: SearchOptions,
    fetch: Callable[[Kind | None, int], Legs],
    language: Language = ENGLISH,
    says: Callable[[str], bool] | None = None,
) -> list[Entry]:
    """The whole search over `fetch(kind, pool)`: what a backend's `FetchLegs` returns."""

    def answer(step: reads.ReadStep) -> object:
        if isinstance(step, reads.FetchLegs):
            return reads.Fetched({kind: fetch(kind, step.pool) for kind in step.kinds})
        return None  # EmbedQuery: the legs come scored already

    found: list[Entry] = drive(reads.search(USER, options, language, says), answer)
    return found
