from datetime import datetime, timezone

from langmem_trpc.service._core import Limits, build_memory, fingerprint, patch_memory
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


def test_patch_keeps_unspecified_fields():
    original = build_memory(
        "Met Bob", limits=LIMITS, kind="episode", event_time="2024-05-06", participants=["Bob"], location="Paris"
    )
    patched = patch_memory(original, "Met Bob for lunch", limits=LIMITS)
    assert patched.kind == Kind.EPISODE
    assert patched.event_time == datetime(2024, 5, 6, tzinfo=timezone.utc)
    assert patched.participants == ["Bob"] and patched.location == "Paris"
