import hashlib
from datetime import datetime, timezone

import pytest

from langmem_trpc.errors import InvalidMemoryError
from langmem_trpc.service.rules import Limits, MemoryPatch, build_memory, fingerprint, memory_from
from langmem_trpc.types import Kind

LIMITS = Limits()


def test_fingerprint_ignores_case_spacing_and_topics():
    a = build_memory("Prefers dark mode", limits=LIMITS, topics=["ui"])
    b = build_memory("  prefers DARK   mode. ", limits=LIMITS)
    assert fingerprint(a) == fingerprint(b)


def test_fingerprint_separates_events_and_explicit_ids():
    monday = build_memory("hiking", limits=LIMITS, kind=Kind.EPISODE, event_time="2024-05-06")
    tuesday = build_memory("hiking", limits=LIMITS, kind=Kind.EPISODE, event_time="2024-05-07")
    assert fingerprint(monday) != fingerprint(tuesday)
    assert fingerprint(monday) != fingerprint(monday, "key-1")


def test_fingerprint_of_comma_free_participants_is_the_historical_one():
    """Stored fingerprints stay valid: lists without commas or U+001F hash as before."""
    memory = build_memory(
        "Met Bob", limits=LIMITS, kind="episode", event_time="2024-05-06",
        participants=["Bob", "Ana"], location="Paris",
    )  # fmt: skip
    historical = "\x1f".join(
        [
            "text:met bob",
            "kind:episode",
            "event:2024-05-06T00:00:00Z",
            "with:ana,bob",
            "at:paris",
        ]
    )
    assert fingerprint(memory) == hashlib.sha256(historical.encode()).hexdigest()
    keyed = hashlib.sha256((historical + "\x1fid:k1").encode()).hexdigest()
    assert fingerprint(memory, "k1") == keyed


def test_fingerprint_is_unambiguous_for_commas_and_separators():
    def fp(**fields: object) -> str:
        return fingerprint(build_memory("lunch", limits=LIMITS, **fields))  # type: ignore[arg-type]

    assert fp(participants=["Smith, John"]) != fp(participants=["Smith", "John"])
    assert fp(participants=["x\x1fat:paris"]) != fp(participants=["x"], location="paris\x1fat:")
    assert fp(participants=["a,b", "c"]) != fp(participants=["a", "b,c"])
    assert fp(participants=["Smith, John"]) == fp(participants=["smith, john"])
    plain = build_memory("lunch", limits=LIMITS)
    assert fingerprint(plain, "a\x1fid:b") != fingerprint(plain, "a")


def test_metadata_is_normalised_to_json_values():
    from langmem_trpc.service.rules import check_metadata

    when = datetime(2024, 5, 1, tzinfo=timezone.utc)
    assert check_metadata({"t": when, "p": (1, "x")}) == {"t": when.isoformat(), "p": [1, "x"]}
    for bad, problem in [
        ({"x": float("nan")}, "metadata.x must be a finite number"),
        ({"x": ["\x00"]}, "metadata.x[0] must not contain NUL bytes"),
        ({2: 1}, "keys must be strings"),
    ]:
        with pytest.raises(InvalidMemoryError, match=problem.replace("[", r"\[")) as info:
            check_metadata(bad)
        assert info.value.field == "metadata"


def test_patch_keeps_unspecified_fields():
    original = build_memory(
        "Met Bob",
        limits=LIMITS,
        kind="episode",
        event_time="2024-05-06",
        participants=["Bob"],
        location="Paris",
    )
    patched = MemoryPatch("Met Bob for lunch").apply(original, LIMITS)
    assert patched.kind == Kind.EPISODE
    assert patched.event_time == datetime(2024, 5, 6, tzinfo=timezone.utc)
    assert patched.participants == ["Bob"] and patched.location == "Paris"


@pytest.mark.parametrize("field", ["text", "topics", "participants", "location"])
def test_lone_surrogates_and_nul_bytes_are_rejected_by_field(field):
    for bad in ("bad \ud800 text", "bad \x00 text"):
        kwargs = {"text": "ok", "topics": None, "participants": None, "location": None}
        kwargs[field] = bad if field in ("text", "location") else [bad]
        text = kwargs.pop("text")
        with pytest.raises(InvalidMemoryError) as info:
            build_memory(text, limits=LIMITS, **kwargs)
        assert info.value.field == field


def test_memory_from_holds_prebuilt_memories_to_the_same_limits():
    from langmem_trpc.service.rules import memory_from
    from langmem_trpc.types import Memory

    assert memory_from("  Likes tea ", limits=LIMITS).text == "Likes tea"
    built = Memory(text="x" * 50, topics=["a"])
    assert memory_from(built, limits=LIMITS) == built
    with pytest.raises(InvalidMemoryError) as info:
        memory_from(built, limits=Limits(max_text_length=10))
    assert info.value.field == "text"


@pytest.mark.parametrize("text", ["  Prefers dark mode ", "北京 café", "x"])
def test_memory_from_a_plain_text_equals_the_fully_validated_memory(text):
    fast = memory_from(text, limits=Limits())
    assert fast == build_memory(text, limits=Limits())
    assert fast.model_dump_json() == build_memory(text, limits=Limits()).model_dump_json()


@pytest.mark.parametrize("text", ["", "   ", "a\x00b", "\ud800"])
def test_memory_from_a_plain_text_still_rejects_bad_text(text):
    with pytest.raises(InvalidMemoryError, match="text"):
        memory_from(text, limits=Limits())


def test_embedding_text_is_the_text_alone():
    from langmem_trpc.service.rules import embedding_text

    assert embedding_text("I went to a support group") == "I went to a support group"
