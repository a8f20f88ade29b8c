from datetime import datetime, timezone

import pytest
from pydantic import ValidationError

from langmem_trpc import InvalidUserKeyError, Memory, SearchOptions, UserKey


def test_participants_are_canonicalised():
    memory = Memory(text="x", participants=[" bob", "Alice", "BOB", "", "alice "])
    assert memory.participants == ["Alice", "bob"]


def test_topics_trimmed_and_deduplicated_in_order():
    assert Memory(text="x", topics=["Go ", "go", "", "k8s"]).topics == ["Go", "k8s"]


def test_event_time_is_utc():
    memory = Memory(text="x", event_time="2024-05-01T12:00:00+02:00")
    assert memory.event_time == datetime(2024, 5, 1, 10, tzinfo=timezone.utc)


def test_naive_event_time_rejected():
    with pytest.raises(ValidationError):
        Memory(text="x", event_time=datetime(2024, 5, 1))


@pytest.mark.parametrize(
    ("app", "user", "field"),
    [
        ("", "u", "app_name"),
        ("a", " ", "user_id"),
        ("a", "x\x00", "user_id"),
        ("a" * 513, "u", "app_name"),
    ],
)
def test_user_key_validation_names_the_field(app, user, field):
    with pytest.raises(InvalidUserKeyError) as info:
        UserKey(app, user)
    assert info.value.field == field


def test_user_key_keeps_ids_exactly():
    assert UserKey("app", "Alice ") != UserKey("app", "alice")
    assert UserKey("app", "alice") == UserKey("app", "alice")
    assert hash(UserKey("app", "alice")) == hash(UserKey("app", "alice"))


def test_search_options_parse_time_strings():
    options = SearchOptions(time_before="2024-01-02")
    assert options.time_before == datetime(2024, 1, 2, tzinfo=timezone.utc)


def test_ids_that_no_backend_can_store_are_refused_naming_the_field():
    from langmem_trpc import InvalidMemoryError
    from langmem_trpc.types import Source

    with pytest.raises(InvalidUserKeyError, match="lone surrogate") as info:
        UserKey("app", "al\ud800ice")
    assert info.value.field == "user_id"
    with pytest.raises(InvalidMemoryError) as bad_source:
        Source(thread_id="t", message_ids=["ok", "m\x00"])
    assert bad_source.value.field == "source.message_ids"
    with pytest.raises(InvalidMemoryError) as bad_decision:
        Source(actor="worker", decision="add\x00")
    assert bad_decision.value.field == "source.decision"
    with pytest.raises(InvalidMemoryError) as bad_copy:
        Source(actor="worker").with_decision(7)  # type: ignore[arg-type]
    assert bad_copy.value.field == "source.decision"
    assert Source(thread_id="t\x1fu", message_ids=["m\u2028"]).thread_id == "t\x1fu"
