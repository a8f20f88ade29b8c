"""`search.masked_query`: the text a hybrid search's vector leg embeds once the first
tier named the participants (FusionSettings.mask_names)."""

from __future__ import annotations

from datetime import datetime, timezone

from langmem_trpc.service.first_tier import masked_query
from langmem_trpc.service.language import Language
from langmem_trpc.service.search import Legs
from langmem_trpc.types import Entry, Memory

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


def _legs(*people: list[str], keyword: bool = False) -> list[Legs]:
    entries = [
        Entry(
            id=f"m{n}",
            app_name="app",
            user_id="alice",
            memory=Memory(text=f"note {n}", participants=names),
            created_at=T0,
            updated_at=T0,
        )
        for n, names in enumerate(people)
    ]
    scored = [(e, 0.5) for e in entries]
    return [Legs(None, scored)] if keyword else [Legs(scored, [])]


def test_a_named_participant_becomes_the_person_word() -> None:
    legs = _legs(["Caroline"], ["Melanie"])
    assert masked_query("What did Caroline paint?", legs) == "What did they paint?"
    assert masked_query("what did CAROLINE paint", legs) == "what did they paint"


def test_a_possessive_name_becomes_the_same_word() -> None:
    legs = _legs(["Caroline"], ["James"])
    assert masked_query("What is Caroline's job?", legs) == "What is they job?"
    assert masked_query("What is Caroline\u2019s job?", legs) == "What is they job?"
    assert masked_query("Where is James' house?", legs) == "Where is they house?"


def test_every_named_participant_is_masked_longest_name_first() -> None:
    legs = _legs(["Mary Ann"], ["Mary"], ["Jon"])
    query = "What do Mary Ann and Jon both like?"
    assert masked_query(query, legs) == "What do they and they both like?"
    assert masked_query("Did Mary  Ann call Mary?", legs) == "Did they call they?"


def test_names_found_in_either_leg_count() -> None:
    assert masked_query("What did Caroline paint?", _legs(["Caroline"], keyword=True)) == (
        "What did they paint?"
    )


def test_a_query_naming_no_candidates_participant_is_returned_as_given() -> None:
    legs = _legs(["Caroline"], [])
    query = "What did  Bob paint?"
    assert masked_query(query, legs) is query
    assert masked_query("Did Carolines paint?", legs) == "Did Carolines paint?"
    assert masked_query("What did Annabel paint?", _legs(["Ann"])) == "What did Annabel paint?"
    assert masked_query("anything", []) == "anything"


def test_a_language_without_a_person_word_drops_the_name() -> None:
    bare = Language(name="english")
    legs = _legs(["Caroline"])
    assert masked_query("What did Caroline's dog eat?", legs, bare) == "What did 's dog eat?"
    assert masked_query("What did Caroline paint?", legs, bare) == "What did paint?"
    assert masked_query("Caroline", legs, bare) == "Caroline"


def test_a_query_of_names_alone_is_returned_as_given() -> None:
    legs = _legs(["Caroline"], ["Melanie"])
    assert masked_query("Caroline", legs) == "Caroline"
    assert masked_query("Caroline and Melanie?", legs) == "Caroline and Melanie?"
