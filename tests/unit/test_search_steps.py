"""The round-10 ranking steps (docs/bench-locomo.md): neighbours (a default),
session-first and keyword feedback (off by default, ablation rows)."""

from datetime import datetime, timedelta, timezone

from langmem_trpc.service.search import Legs, _neighbours, _session_first
from langmem_trpc.types import FUSION_STEPS_OFF, Entry, FusionSettings, Kind, Memory, SearchOptions

from .search_driver import execute_search

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
S1, S2 = T0, T0 + timedelta(days=7)


def turn(key: str, text: str, session: datetime, minute: int) -> Entry:
    at = T0 + timedelta(minutes=minute)
    memory = Memory(text=text, kind=Kind.EPISODE, event_time=session)
    return Entry(id=key, app_name="a", user_id="u", memory=memory, created_at=at, updated_at=at)


def ranked(legs: Legs, **fusion: float) -> list[str]:
    options = SearchOptions(query="pottery", fusion=FusionSettings(context_weight=0.0, **fusion))
    return [e.id for e in execute_search(options, lambda kind, pool: legs)]


def test_the_round_10_steps_are_opt_in_and_switch_off_with_the_other_steps():
    assert FusionSettings().neighbour_weight == 0.0
    off = FusionSettings(**FUSION_STEPS_OFF)
    assert (off.neighbour_weight, off.session_weight, off.feedback_weight) == (0.0, 0.0, 0.0)
    assert (FusionSettings().session_weight, FusionSettings().feedback_weight) == (0.0, 0.0)


def test_a_turn_gains_from_the_reply_after_it_in_its_session():
    said = turn("said", "I finally went yesterday", S1, 0)
    reply = turn("reply", "Oh, the pottery class? How was it?", S1, 1)
    later = turn("later", "Anyway, see you", S1, 2)
    other = turn("other", "I like pottery too", S2, 3)
    fused = {"said": 0.1, "reply": 0.5, "later": 0.2, "other": 0.3}
    best = {e.id: (e, 0.0) for e in (said, reply, later, other)}
    out = _neighbours(fused, best, 0.25)
    assert out == {"said": 0.1 + 0.25 * 0.5, "reply": 0.5 + 0.25 * 0.2, "later": 0.2, "other": 0.3}
    legs = Legs([(reply, 0.60), (other, 0.52), (said, 0.50)], [])
    assert ranked(legs) == ["reply", "other", "said"]  # off by default
    assert ranked(legs, neighbour_weight=0.25) == [
        "said",
        "reply",
        "other",
    ]  # 0.1875 + 0.25 x 0.225 > 0.225


def test_session_first_prefers_a_session_with_several_good_hits():
    lone = turn("lone", "x", S1, 0)
    group = [turn(f"g{i}", "y", S2, i + 1) for i in range(3)]
    fused = {"lone": 0.50, "g0": 0.48, "g1": 0.40, "g2": 0.40}
    best = {e.id: (e, 0.0) for e in (lone, *group)}
    out = _session_first(fused, best, 1.0)
    assert out["lone"] == (0.50 + 0.50 / 3) / 2
    assert out["g0"] > out["lone"]


def test_feedback_raises_a_candidate_sharing_the_top_keyword_hits_other_words():
    top = turn("top", "pottery class with clay bowls", S1, 0)
    related = turn("related", "glazing the clay bowls", S2, 1)
    unrelated = turn("unrelated", "watching the football game", S2, 2)
    legs = Legs([(unrelated, 0.42), (related, 0.40), (top, 0.5)], [(top, 0.9)])
    assert ranked(legs, neighbour_weight=0.0) == ["top", "unrelated", "related"]
    assert ranked(legs, neighbour_weight=0.0, feedback_weight=0.5) == [
        "top",
        "related",
        "unrelated",
    ]


def test_memories_written_at_one_instant_are_not_neighbours():
    first, second = turn("first", "a", S1, 0), turn("second", "b", S1, 0)
    best = {e.id: (e, 0.0) for e in (first, second)}
    fused = {"first": 0.1, "second": 0.5}
    assert _neighbours(fused, best, 0.25) == fused
