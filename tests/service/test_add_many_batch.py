"""The batch path of `add_many` (issue 25 item 6): the tokenizer's per-`Language` term
cache, the fast ASCII tokenizer and text normaliser (same tokens, same fingerprints as
before), and SQLite writing a batch's history in one statement from the rows it inserted."""

from __future__ import annotations

import random
import re
import string
import sys
import unicodedata
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from langmem_trpc import InMemoryMemoryService, Limits, Memory, Operation, Source, UserKey
from langmem_trpc.backends.sqlite import SQLiteMemoryService
from langmem_trpc.service import language as language_module
from langmem_trpc.service.language import MAX_TOKEN_CHARS, Language
from langmem_trpc.service.text import normalize_text, primary_tokens

ALICE = UserKey("batch", "alice")
SOURCE = Source(actor="importer", thread_id="t1")


# --- the term cache ----------------------------------------------------------


def test_terms_follow_the_tokenizer_rules() -> None:
    english = Language(name="english", stopwords=frozenset({"the"}))
    blob = "x" * (MAX_TOKEN_CHARS + 40)
    words = ["the", "hiking", "a", "hiking", "cats", blob]
    assert english.terms(words) == ["hike", "hike", "cat", blob[:MAX_TOKEN_CHARS]]
    assert english.terms(words) == english.terms(list(words))  # from the cache, the same


def test_the_term_cache_belongs_to_one_language_and_stays_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(language_module, "TERM_CACHE_WORDS", 8)
    first, second = Language(name="english"), Language(name="english")
    first.terms([f"word{i}" for i in range(50)])
    assert 0 < len(first._terms) <= 8
    assert second._terms == {}  # no state shared between instances
    long_word = "y" * (language_module.CACHED_WORD_CHARS + 1)
    second.terms([long_word])
    assert second._terms == {}  # a pasted blob is stemmed each time, never kept


def test_a_full_cache_gives_the_same_terms_as_an_empty_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(language_module, "TERM_CACHE_WORDS", 3)
    cached, fresh = Language(name="english"), Language(name="english")
    words = "running dogs jumped over the sleeping cats quickly".split()
    for _ in range(3):
        assert cached.terms(words) == [fresh.stem(w) for w in words if len(w) >= 2]


# --- the ASCII fast paths ----------------------------------------------------


def _ascii_texts(n: int) -> Iterator[str]:
    rng = random.Random(5)
    alphabet = string.ascii_letters + string.digits + string.punctuation + " \t\n\x1f\x0b"
    for _ in range(n):
        yield "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))


@pytest.mark.parametrize("stem", [True, False])
def test_ascii_text_gets_the_tokens_of_the_general_tokenizer(stem: bool) -> None:
    """A one-letter non-ASCII word sends a text down the general path and adds no token."""
    for text in [*_ascii_texts(400), "Hiked, HIKING: the 2nd-trip's end!", "K  Kelvin"]:
        assert primary_tokens(text, stem=stem) == primary_tokens(text + " é", stem=stem)


def test_normalize_text_is_the_old_regex_normalisation() -> None:
    """Stored fingerprints hash `normalize_text`: the str.split form must equal the
    `\\s+` substitution it replaced on every whitespace character."""
    whitespace = [chr(c) for c in range(sys.maxunicode + 1) if re.fullmatch(r"\s", chr(c))]

    def old(text: str) -> str:
        text = unicodedata.normalize("NFKC", text)
        return re.sub(r"\s+", " ", text).strip().casefold().rstrip(".!?。！？ ")

    samples = [f"{w}Hello{w}{w}World!{w}" for w in whitespace] + list(_ascii_texts(200))
    samples += ["ǅ ß ﬁ  . !", "Ünïcödé\u3000text。", "  ok ."]
    assert [normalize_text(s) for s in samples] == [old(s) for s in samples]


# --- SQLite: a batch's history in one statement -------------------------------


@pytest.fixture
def sqlite_service(tmp_path: Path) -> Iterator[SQLiteMemoryService]:
    service = SQLiteMemoryService(tmp_path / "m.db", limits=Limits(capacity=None))
    yield service
    service.close()


def _history_inserts(service: SQLiteMemoryService) -> list[str]:
    seen: list[str] = []
    service._db.connection().set_trace_callback(seen.append)
    return seen


def test_a_batch_records_its_history_in_one_statement(
    sqlite_service: SQLiteMemoryService,
) -> None:
    statements = _history_inserts(sqlite_service)
    entries = sqlite_service.add_many(ALICE, [f"fact number {i}" for i in range(40)], source=SOURCE)
    history_writes = [s for s in statements if s.lstrip().startswith("INSERT INTO history")]
    assert len(history_writes) == 1  # not one per row
    for entry in entries:
        (event,) = sqlite_service.history(ALICE, entry.id)
        assert event.operation == Operation.ADD
        assert (event.text_before, event.text_after) == (None, entry.text)
        assert event.at == entry.created_at
        assert event.source == SOURCE


def test_a_mixed_batch_records_the_history_of_the_reference(
    sqlite_service: SQLiteMemoryService,
) -> None:
    """Known content, a revive and new rows in one batch: the same events as the
    in-memory reference backend (the rows that are not plain adds take the per-event path)."""
    reference = InMemoryMemoryService(limits=Limits(capacity=None))
    items: list[str | Memory] = ["alpha one", "beta two", "alpha one", "gamma three"]
    events = []
    for service in (sqlite_service, reference):
        gone = service.add(ALICE, "beta two")
        service.delete(ALICE, gone.id)
        service.add(ALICE, "alpha one")
        entries = service.add_many(ALICE, items, source=SOURCE)
        events.append(
            [
                [
                    (h.operation, h.text_before, h.text_after, h.source)
                    for h in service.history(ALICE, e.id)
                ]
                for e in entries
            ]
        )
    assert events[0] == events[1]
    assert [ops[-1][0] for ops in events[0]] == [
        Operation.ADD,
        Operation.ADD,
        Operation.ADD,
        Operation.ADD,
    ]


def test_batch_rows_with_fields_and_event_times_round_trip(
    sqlite_service: SQLiteMemoryService,
) -> None:
    when = datetime(2024, 5, 1, 9, 30, tzinfo=timezone.utc)
    items: list[str | Memory] = [
        Memory(text="Met Priya at the climbing gym", topics=["sport"], event_time=when),
        Memory(text="Prefers green tea", participants=["Priya"], location="Lisbon"),
        "plain text row",
    ]
    entries = sqlite_service.add_many(ALICE, items)
    for entry in entries:
        stored = sqlite_service.get(ALICE, entry.id)
        assert stored is not None and stored.memory == entry.memory
        assert (stored.created_at, stored.updated_at) == (entry.created_at, entry.created_at)
    assert entries[0].valid_from == when  # the event time, not the write time
    assert entries[1].valid_from == entries[1].created_at
    assert [e.text for e in sqlite_service.search(ALICE, "Lisbon")] == ["Prefers green tea"]
    assert [e.text for e in sqlite_service.search(ALICE, "sport")] == [entries[0].text]
