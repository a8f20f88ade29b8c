from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime, timezone

import pytest
from langchain_core.messages import HumanMessage

from langmem_trpc import AutoMemoryWorker, InMemoryMemoryService, Kind, UserKey
from langmem_trpc.extraction import Action, JobStatus, MemoryOp
from langmem_trpc.extraction.policies import append_only, apply_policy, preserve_history
from langmem_trpc.extraction.reconcile import (
    JACCARD_HIGH,
    PROBE_OPTIONS,
    Tier,
    classify,
    merge_similar,
)
from langmem_trpc.extraction.signals import numbers, values_agree
from langmem_trpc.service.language import Language, language
from langmem_trpc.service.text import token_jaccard

USER = UserKey("app", "u")
ALL = frozenset({Action.ADD, Action.UPDATE, Action.DELETE})
MON = datetime(2024, 5, 20, tzinfo=timezone.utc)
TUE = datetime(2024, 5, 21, tzinfo=timezone.utc)


def store(*texts, **kw):
    svc = InMemoryMemoryService()
    entries = [svc.add(USER, t, **kw) for t in texts]
    return svc, entries


def probe(svc):
    return lambda text: svc.search(USER, text, PROBE_OPTIONS)


def test_values_agree_on_numbers_dates_negations_names():
    assert values_agree("Runs Go in production", "Runs Go in production.")
    assert not values_agree("Runs Go 1.23", "Runs Go 1.24")
    assert not values_agree("Likes coffee", "Does not like coffee")
    assert not values_agree("Went hiking on Monday", "Went hiking on Tuesday")
    assert not values_agree("Has a dog named Rex", "Has a dog named Max")


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("Has two kids", {"2"}),
        ("Turned twenty-five in May", {"25"}),
        ("Walks five thousand steps", {"5000"}),
        ("Invited two hundred and five people", {"205"}),
        ("Has two and three year old sons", {"2", "3"}),
        ("Earns $100k, up from 95,000", {"100000", "95000"}),
        ("Bought a dozen eggs", {"12"}),
        ("Has 1.5k followers and 99999999999999999999k views", {"1500", "99999999999999999999000"}),
        ("Runs Go 1.23 since 2024-03-01", {"1.23", "2024-03-01"}),
        ("One of my friends said no one came, one day", set()),
        ("Has one cat", {"1"}),
    ],
)
def test_numbers_are_read_as_values(text: str, found: set[str]):
    assert numbers(text) == found


def test_number_words_are_english_only():
    """Another language's store reads digits only: its words are not English numbers."""
    assert numbers("Hat two Katzen und 3 Hunde", language("german")) == {"3"}


def test_a_respelled_number_is_a_paraphrase_and_a_changed_one_an_update():
    assert values_agree("Has 2 kids", "Has two kids")
    assert not values_agree("Has two cats", "Has three cats")
    svc, (cats,) = store("The user has two cats at home")
    op = MemoryOp.add("The user has three cats at home")
    result = merge_similar([op], probe(svc), ALL)
    assert result.ops == [replace(op.as_update(cats.id, [], Kind.FACT, "x"), supersede=True)]


def test_version_bump_is_an_update_never_a_skip():
    svc, (go,) = store("The user's production environment runs Go 1.23")
    op = MemoryOp.add("The user's production environment runs Go 1.24")
    match = classify(op, svc.search(USER, op.text, PROBE_OPTIONS)[0])
    assert match is not None and match.jaccard >= 0.70 and match.tier == Tier.UPDATE
    result = merge_similar([op], probe(svc), ALL)  # a changed value: an update that supersedes
    assert result.ops == [replace(op.as_update(go.id, [], Kind.FACT, "x"), supersede=True)]


def test_paraphrase_is_skipped_and_new_topics_become_an_update():
    svc, (tea,) = store("Enjoys drinking green tea in the morning", topics=["tea"])
    same = MemoryOp.add("Enjoys drinking green tea in the morning.", topics=["tea"])
    assert merge_similar([same], probe(svc), ALL).ops == []
    assert len(merge_similar([same], probe(svc), ALL).duplicates) == 1
    more = MemoryOp.add("Enjoys drinking green tea in the morning", topics=["morning routine"])
    (rewritten,) = merge_similar([more], probe(svc), ALL).ops
    assert rewritten.action == Action.UPDATE and rewritten.memory_id == tea.id
    assert rewritten.topics == ("tea", "morning routine")


def test_different_events_are_never_merged():
    svc, _ = store(
        "Went hiking at Mount Tam with Sam", kind="episode", event_time=MON, participants=["Sam"]
    )
    other_day = MemoryOp.add(
        "Went hiking at Mount Tam with Sam", kind=Kind.EPISODE, event_time=TUE, participants=["Sam"]
    )
    assert merge_similar([other_day], probe(svc), ALL).ops == [other_day]
    svc2, _ = store("Went hiking on Monday", kind="episode")
    tuesday = MemoryOp.add("Went hiking on Tuesday", kind=Kind.EPISODE)
    assert merge_similar([tuesday], probe(svc2), ALL).ops == [tuesday]
    svc3, _ = store("Went hiking with Sam", kind="episode", event_time=MON, location="Mount Tam")
    elsewhere = MemoryOp.add(
        "Went hiking with Sam", kind=Kind.EPISODE, event_time=MON, location="Yosemite"
    )
    assert merge_similar([elsewhere], probe(svc3), ALL).ops == [elsewhere]


def test_same_event_gains_detail():
    svc, (hike,) = store("Went hiking at Mount Tam", kind="episode", event_time=MON)
    op = MemoryOp.add(
        "Went hiking at Mount Tam with Sam and saw a deer", kind=Kind.EPISODE, event_time=MON
    )
    (decided,) = merge_similar([op], probe(svc), ALL).ops
    assert decided.action == Action.UPDATE and decided.memory_id == hike.id


def test_failed_probe_and_disabled_update_keep_the_add():
    svc, _ = store("Production runs Go 1.23")
    op = MemoryOp.add("Production runs Go 1.24")

    def broken(text):
        raise RuntimeError("db down")

    assert merge_similar([op], broken, ALL).ops == [op]
    assert merge_similar([op], probe(svc), {Action.ADD}).ops == [op]


def test_one_rewrite_per_target_and_batch_duplicates_dropped():
    svc, (go,) = store("Production runs Go 1.23")
    first = MemoryOp.add("Production runs Go 1.24")
    second = MemoryOp.add("Production runs Go 1.25")
    repeat = MemoryOp.add("Production runs Go 1.24.")
    result = merge_similar([first, second, repeat], probe(svc), ALL)
    assert [op.action for op in result.ops] == [Action.UPDATE, Action.ADD]
    assert result.ops[0].memory_id == go.id
    assert result.duplicates == [repeat]


def test_verbatim_records_only_deduplicated_when_identical():
    svc, _ = store("I love hiking", kind="episode")
    a = MemoryOp.add("I love hiking!", kind=Kind.EPISODE, verbatim=True)
    result = apply_policy("merge_similar", [a, a], probe=probe(svc), existing=[], actions=ALL)
    assert result.ops == [a] and result.duplicates == [a]


def test_preserve_history_updates_only_when_every_detail_is_kept():
    svc, (dog,) = store("Has a dog named Rex")
    detail = MemoryOp.add("Has a dog named Rex, a beagle")
    (kept,) = preserve_history([detail], [dog], ALL).ops
    assert kept.action == Action.UPDATE and kept.memory_id == dog.id
    assert kept.decision == "update:preserve_history"
    change = MemoryOp.add("Has a dog named Max")
    assert preserve_history([change], [dog], ALL).ops == [change]
    rewrite = MemoryOp.update(dog.id, "Has a cat named Rex")  # loses "dog", changes no state
    (converted,) = preserve_history([rewrite], [dog], ALL).ops
    assert converted.action == Action.ADD and converted.memory_id is None
    assert converted.decision == "add:preserve_history"
    gone = MemoryOp.update(dog.id, "No longer has a dog")  # a changed state: a supersede
    (closed,) = preserve_history([gone], [dog], ALL).ops
    assert closed.supersede and closed.decision == "supersede:model change=negation"
    assert preserve_history([MemoryOp.add("Has a dog named Rex.")], [dog], ALL).ops == []


def test_append_only_turns_updates_into_adds_and_drops_deletes():
    svc, (dog,) = store("Has a dog named Rex")
    ops = [
        MemoryOp.update(dog.id, "Has a cat"),
        MemoryOp.delete(dog.id),
        MemoryOp.add("Has a dog named Rex"),
    ]
    result = append_only(ops, [dog])
    assert [(o.action, o.text) for o in result.ops] == [(Action.ADD, "Has a cat")]
    assert result.ops[0].decision == "add:append_only"
    assert len(result.duplicates) == 1


def test_each_kept_or_rewritten_add_carries_its_decision_and_figures():
    svc, (go, tea) = store("Production runs Go 1.23", "Enjoys drinking green tea in the morning")
    bump = MemoryOp.add("Production runs Go 1.24")
    (updated,) = merge_similar(
        [MemoryOp.add("Production runs Go 1.23 in Frankfurt")], probe(svc), ALL
    ).ops
    assert re.fullmatch(r"update tier=update score=\d\.\d\d jaccard=\d\.\d\d", updated.decision)
    (superseded,) = merge_similar([bump], probe(svc), ALL).ops
    assert re.fullmatch(
        r"supersede tier=update score=\d\.\d\d jaccard=\d\.\d\d change=number", superseded.decision
    )
    topics = MemoryOp.add("Enjoys drinking green tea in the morning", topics=["routine"])
    (merged,) = merge_similar([topics], probe(svc), ALL).ops
    assert merged.memory_id == tea.id
    assert re.fullmatch(r"update:topics tier=skip score=\d\.\d\d jaccard=1\.00", merged.decision)
    (kept,) = merge_similar([bump], probe(svc), {Action.ADD}).ops
    assert kept.action == Action.ADD and kept.decision.startswith("add:kept tier=update ")
    (fresh,) = merge_similar([MemoryOp.add("Keeps three beehives")], probe(svc), ALL).ops
    assert re.fullmatch(r"add( tier=none .*)?", fresh.decision)

    def broken(text):
        raise RuntimeError("db down")

    assert merge_similar([bump], broken, ALL).ops[0].decision == "add:probe-failed"


# -- the token Jaccard is the store's language's --------------------------------

GERMAN = Language(name="german", stopwords=frozenset("der die das den dem im in mit und".split()))
COOKS = "Anna backt gerne süße Kuchen mit frischen Beeren"
COOKED = (
    "Anna backte gern süßen Kuchen mit frischem Beeren"  # the same statement, other inflections
)


def test_reconcile_jaccard_stems_and_drops_stopwords_in_the_given_language():
    assert (
        token_jaccard(COOKS, COOKED) < JACCARD_HIGH
    )  # English stems keep gerne/gern, süße/süßen ...
    assert token_jaccard(COOKS, COOKED, GERMAN) == 1.0
    first, repeat = MemoryOp.add(COOKS), MemoryOp.add(COOKED)
    nothing = lambda text: []  # noqa: E731 - an empty store
    assert len(merge_similar([first, repeat], nothing, ALL).ops) == 2
    german = merge_similar([first, repeat], nothing, ALL, GERMAN)
    assert german.ops == [first] and german.duplicates == [repeat]
    svc = InMemoryMemoryService(language=GERMAN)
    (stored,) = svc.search(USER, COOKED, PROBE_OPTIONS) or [svc.add(USER, COOKS)]
    match = classify(repeat, stored, GERMAN)
    assert match is not None and match.jaccard == 1.0 and match.tier == Tier.SKIP


def test_the_worker_reconciles_in_the_services_language():
    class TwoFacts:
        uses_existing = False

        def extract(self, request):
            return [MemoryOp.add(COOKS), MemoryOp.add(COOKED)]

    def stored_after_one_batch(svc):
        report = AutoMemoryWorker(svc, TwoFacts()).process(USER, "t", [HumanMessage("hi", id="m")])
        assert report.status == JobStatus.COMPLETED
        return sorted(e.text for e in svc.read(USER))

    assert stored_after_one_batch(InMemoryMemoryService(language=GERMAN)) == [COOKS]
    assert stored_after_one_batch(InMemoryMemoryService()) == sorted([COOKS, COOKED])
