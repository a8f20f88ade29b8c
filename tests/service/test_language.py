"""The `language` option: every backend tokenises with the service's language, and the
durable backends record it and refuse to open their data under another one."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from langmem_trpc import (
    ConfigurationError,
    InMemoryMemoryService,
    PostgresMemoryService,
    SQLiteMemoryService,
    UserKey,
)
from langmem_trpc.backends.sqlite import MIGRATIONS
from langmem_trpc.service.language import ENGLISH, Language, language, resolve_language

ALICE = UserKey("lang", "alice")
HIKE = "Wir wanderten in den Bergen"

Factory = Callable[..., Any]


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def make(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Factory]:
    """A factory of services of one backend, each on its own fresh store."""
    opened: list[Any] = []
    counter = iter(range(100))

    def factory(**kwargs: Any) -> Any:
        if request.param == "memory":
            service: Any = InMemoryMemoryService(**kwargs)
        elif request.param == "sqlite":
            service = SQLiteMemoryService(tmp_path / f"m{next(counter)}.db", **kwargs)
        else:
            url = request.getfixturevalue("pg_server").create_database(
                f"{request.node.name}_{next(counter)}"
            )
            service = PostgresMemoryService(url, **kwargs)
            service.setup()
        opened.append(service)
        return service

    yield factory
    for service in opened:
        service.close()


def test_german_stems_inflected_forms_on_every_backend(make: Factory) -> None:
    german = make(language="german")
    german.add(ALICE, HIKE)
    assert [e.text for e in german.search(ALICE, "Berg")] == [HIKE]  # bergen -> berg
    english = make()
    english.add(ALICE, HIKE)
    assert english.search(ALICE, "Berg") == []  # English leaves "bergen" alone


async def test_the_async_twins_use_the_language_too(make: Factory) -> None:
    german = make(language="German")
    await german.aadd(ALICE, HIKE)
    assert [e.text for e in await german.asearch(ALICE, "Berg")] == [HIKE]


def test_the_language_is_an_attribute_of_each_instance(make: Factory) -> None:
    german, english = make(language="german"), make()
    assert german.language is language("german") and english.language is ENGLISH


def test_the_services_question_words_weigh_lightly(make: Factory) -> None:
    """The query's question words come from the service's language, not English."""
    scores = []
    for lang in (Language(name="german", question_words=frozenset({"wann"})), "german"):
        svc = make(language=lang)
        svc.add(ALICE, "Wann genau")
        svc.add(ALICE, "Berg genau")
        scores.append({e.text: e.score for e in svc.search(ALICE, "wann Berg")})
    light, plain = scores
    assert light["Berg genau"] > light.get("Wann genau", 0.0)  # may fall under the floor
    assert plain["Berg genau"] == pytest.approx(plain["Wann genau"])


@pytest.mark.parametrize("bad", ["klingon", "", 42])
def test_an_unknown_language_is_a_clear_error_naming_the_field(make: Factory, bad: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"^language: "):
        make(language=bad)


def test_resolve_language_accepts_names_in_any_case_and_languages() -> None:
    assert resolve_language(" French ") is language("french")
    assert resolve_language(ENGLISH) is ENGLISH


def test_reopening_a_sqlite_file_with_another_language_is_refused(tmp_path: Any) -> None:
    path = tmp_path / "de.db"
    svc = SQLiteMemoryService(path, language="german")
    svc.add(ALICE, HIKE)
    svc.close()
    with pytest.raises(ConfigurationError, match="'german'.*'english'"):
        SQLiteMemoryService(path)
    with pytest.raises(ConfigurationError, match="'german'.*'french'"):
        SQLiteMemoryService(path, language="french")
    with sqlite3.connect(path) as conn:  # nothing changed by the refused opens
        assert conn.execute("SELECT value FROM langmem_settings").fetchall() == [("german",)]
        assert conn.execute("SELECT content_doc FROM memories").fetchall() == [
            ("wir wandert in den berg",)
        ]
    svc = SQLiteMemoryService(path, language="german")
    assert [e.text for e in svc.search(ALICE, "Berg")] == [HIKE]
    svc.close()


def test_a_sqlite_file_from_before_the_language_was_recorded_is_english(tmp_path: Any) -> None:
    path = tmp_path / "old.db"
    SQLiteMemoryService(path).close()
    (settings,) = [m for m in MIGRATIONS if any("TABLE langmem_settings" in s for s in m)]
    with sqlite3.connect(path) as conn:  # the settings migration on a file without them
        conn.execute("DROP TABLE langmem_settings")  # (later migrations cannot rerun)
        for statement in settings:
            conn.execute(statement)
    with pytest.raises(ConfigurationError, match="'english'.*'german'"):
        SQLiteMemoryService(path, language="german")
    SQLiteMemoryService(path).close()


def test_a_postgres_database_set_up_in_one_language_refuses_another(pg_url: str) -> None:
    svc = PostgresMemoryService(pg_url, language="german")
    svc.setup()
    svc.add(ALICE, HIKE)
    svc.close()
    other = PostgresMemoryService(pg_url)
    with pytest.raises(ConfigurationError, match="'german'.*'english'"):
        other.setup()
    with pytest.raises(ConfigurationError, match="'german'.*'english'"):
        other.search(ALICE, "Berg")  # without setup(): the first operation checks
    with pytest.raises(ConfigurationError, match="'german'.*'english'"):
        other.add(ALICE, "Bergen")
    other.close()
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT value FROM langmem_settings").fetchall() == [("german",)]
        assert conn.execute("SELECT count(*) FROM langmem_memories").fetchone() == (1,)
    again = PostgresMemoryService(pg_url, language="german")
    assert [e.text for e in again.search(ALICE, "Berg")] == [HIKE]
    again.close()


async def test_the_async_postgres_operations_check_the_language(pg_url: str) -> None:
    svc = PostgresMemoryService(pg_url, language="french")
    await svc.asetup()
    await svc.aclose()
    other = PostgresMemoryService(pg_url)
    with pytest.raises(ConfigurationError, match="'french'.*'english'"):
        await other.asearch(ALICE, "anything")
    await other.aclose()
