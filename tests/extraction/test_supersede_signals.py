"""The two signals of a supersede and the decisions the policies take on them (issue #26).

Pure decisions over a real in-memory service's probes: signal 1 (the same memory:
the model's update call, or reconcile's update/skip tier), signal 2 (a change of
state: `signals.state_change`), facts only. The over-invalidation guards are here:
shared words never close a fact, an enrichment or paraphrase updates in place,
an episode is never superseded.
"""

from __future__ import annotations

import logging
import re
from datetime import datetime, timezone

import pytest

from langmem_trpc import InMemoryMemoryService, Kind, UserKey
from langmem_trpc.extraction import Action, MemoryOp
from langmem_trpc.extraction.policies import apply_policy, preserve_history
from langmem_trpc.extraction.reconcile import PROBE_OPTIONS, merge_similar
from langmem_trpc.extraction.signals import change_marker, state_change
from langmem_trpc.extraction.supersede import judge
from langmem_trpc.service.language import language

USER = UserKey("app", "u")
ALL = frozenset({Action.ADD, Action.UPDATE, Action.DELETE})
SUPERSEDE = re.compile(r"^supersede tier=update score=\d\.\d\d jaccard=\d\.\d\d change=number$")


def store(*texts, **kw):
    svc = InMemoryMemoryService()
    return svc, [svc.add(USER, t, **kw) for t in texts]


def probe(svc):
    return lambda text: svc.search(USER, text, PROBE_OPTIONS)


@pytest.mark.parametrize(
    ("old", "new", "change"),
    [
        ("Production runs Go 1.23", "Production runs Go 1.24", "number"),
        ("Lives in Berlin", "Lives in Munich", "name"),
        ("Has a dog", "No longer has a dog", "negation"),
        ("Is vegetarian", "Is not vegetarian any more", "negation"),
        ("Lives in Berlin", "Now lives in Berlin", "marker:now"),
        ("Drinks coffee", "Switched to tea", "marker:switched"),
        ("Has standup on Monday", "Has standup on Tuesday", "date"),
        ("Works at Acme", "Works at Acme with Bob on payments", None),  # an enrichment
        ("Enjoys hiking", "Loves hiking", None),  # a paraphrase
        ("Production runs Go 1.23", "Production runs Go 1.23 on Kubernetes", None),
        ("Now lives in Berlin", "Now lives in Berlin with Sam", None),  # the marker was there
    ],
)
def test_state_change_names_what_changed_and_nothing_for_enrichments(old, new, change):
    assert state_change(old, new) == change


def test_change_markers_are_per_language_with_english_the_default():
    assert change_marker("We upgraded production to Go 1.24") == "upgraded"
    assert change_marker("Is not there any  more") == "any more"
    assert change_marker("Known for years") is None  # "now" inside a word is no marker
    german = language("german")
    assert change_marker("Wohnt jetzt in Berlin", german) == "jetzt"
    assert change_marker("Wohnt now in Berlin", german) is None
    assert change_marker("Vive ahora en Madrid", language("spanish")) == "ahora"
    assert change_marker("Lives now in Oslo", language("danish")) == "now"  # unlisted: English
    assert change_marker("现在住在上海") == "现在"


def test_judge_supersedes_facts_only_and_never_an_already_superseded_version():
    svc, (go,) = store("Production runs Go 1.23")
    assert judge(go, "Production runs Go 1.24", Kind.FACT).supersede
    assert not judge(go, "Production runs Go 1.23 on Kubernetes", Kind.FACT).supersede
    assert not judge(go, "Production runs Go 1.24", Kind.EPISODE).supersede
    closed = go.model_copy(update={"superseded_by": "m9"})
    assert not judge(closed, "Production runs Go 1.24", Kind.FACT).supersede
    when = datetime(2024, 5, 1, tzinfo=timezone.utc)
    trip = svc.add(USER, "Flew to Lisbon for 3 days", kind=Kind.EPISODE, event_time=when)
    verdict = judge(trip, "Flew to Lisbon for 4 days", Kind.EPISODE)
    assert not verdict.supersede and verdict.change == "number"
    assert verdict.why == "an episode is never superseded"


def test_reconcile_update_tier_with_a_change_of_state_is_a_supersede():
    svc, (go,) = store("Production runs Go 1.23")
    (op,) = merge_similar([MemoryOp.add("Production runs Go 1.24")], probe(svc), ALL).ops
    assert op.action == Action.UPDATE and op.memory_id == go.id and op.supersede
    assert SUPERSEDE.match(op.decision or ""), op.decision


def test_an_enrichment_matched_by_reconcile_updates_in_place():
    svc, (go,) = store("Production runs Go 1.23")
    more = MemoryOp.add("Production runs Go 1.23 on Kubernetes")
    (op,) = merge_similar([more], probe(svc), ALL).ops
    assert op.action == Action.UPDATE and op.memory_id == go.id and not op.supersede
    assert (op.decision or "").startswith("update tier=update ")


def test_shared_words_without_the_same_memory_never_close_a_fact(caplog):
    svc, (go,) = store("Production runs Go 1.23")
    staging = MemoryOp.add("Staging runs Go 1.24")
    with caplog.at_level(logging.INFO, logger="langmem_trpc.extraction.supersede"):
        (op,) = merge_similar([staging], probe(svc), ALL).ops
    assert op.action == Action.ADD and not op.supersede
    assert f"kept beside memory {go.id}" in caplog.text
    assert "not the same memory (tier=none" in caplog.text and "change=number" in caplog.text


def test_an_update_that_is_off_keeps_the_add_and_says_why(caplog):
    svc, (go,) = store("Production runs Go 1.23")
    with caplog.at_level(logging.INFO, logger="langmem_trpc.extraction.supersede"):
        (op,) = merge_similar(
            [MemoryOp.add("Production runs Go 1.24")], probe(svc), {Action.ADD}
        ).ops
    assert op.action == Action.ADD and op.decision.startswith("add:kept ")
    assert "update is off or the memory is taken" in caplog.text


def test_an_episode_matched_by_reconcile_is_never_superseded():
    when = datetime(2024, 5, 1, tzinfo=timezone.utc)
    svc, (trip,) = store("Went to the Lisbon office", kind=Kind.EPISODE, event_time=when)
    again = MemoryOp.add("Went to the Lisbon office again", kind=Kind.EPISODE, event_time=when)
    ops = merge_similar([again], probe(svc), ALL).ops
    assert not any(op.supersede for op in ops)


def test_preserve_history_turns_the_models_changing_update_into_a_supersede():
    svc, (go,) = store("Production runs Go 1.23")
    bump = MemoryOp.update(go.id, "Production runs Go 1.24", kind=Kind.FACT)
    (op,) = preserve_history([bump], [go], ALL).ops
    assert op.action == Action.UPDATE and op.supersede
    assert op.decision == "supersede:model change=number"
    detail = MemoryOp.update(go.id, "Production runs Go 1.23 on Kubernetes", kind=Kind.FACT)
    (kept,) = preserve_history([detail], [go], ALL).ops
    assert not kept.supersede and kept.decision == "update:preserve_history"


@pytest.mark.parametrize("policy", ["preserve_history", "append_only"])
def test_the_second_row_of_a_changed_fact_becomes_a_supersede(policy):
    svc, (go,) = store("Production runs Go 1.23")
    ops = [MemoryOp.add("Production runs Go 1.24"), MemoryOp.add("Staging runs Go 1.24")]
    decided = apply_policy(policy, ops, probe=probe(svc), existing=[go], actions=ALL)
    first, second = decided.ops
    assert first.supersede and first.memory_id == go.id and SUPERSEDE.match(first.decision)
    assert second.action == Action.ADD and not second.supersede
    adds_only = apply_policy(policy, ops, probe=probe(svc), existing=[go], actions={Action.ADD})
    assert [o.action for o in adds_only.ops] == [Action.ADD, Action.ADD]


def test_a_failed_probe_keeps_the_add_under_every_policy():
    def broken(text):
        raise RuntimeError("db down")

    op = MemoryOp.add("Production runs Go 1.24")
    for policy in ("merge_similar", "preserve_history", "append_only"):
        decided = apply_policy(policy, [op], probe=broken, existing=[], actions=ALL)
        assert [o.action for o in decided.ops] == [Action.ADD], policy
