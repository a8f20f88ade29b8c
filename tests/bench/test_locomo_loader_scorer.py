from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.locomo.loader import load_locomo, normalize_evidence
from benchmarks.locomo.scorer import aggregate, f1_score, normalize_answer, score_answer
from langmem_trpc import ConfigurationError

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "locomo10.json"


def test_loader_enumerates_session_lists_not_date_keys(sample_path):
    conv = load_locomo(sample_path).conversations[0]
    assert [s.number for s in conv.sessions] == [1, 2]
    assert conv.turns[0].date is not None and conv.turns[0].date.isoformat().startswith(
        "2023-05-08T13:56"
    )
    assert conv.turns[2].display_text.endswith("[shared a photo of a dog]")


def test_loader_repairs_and_reports_evidence(sample_path):
    conv = load_locomo(sample_path).conversations[0]
    evidence = {q.question: q.evidence for q in conv.questions}
    assert evidence["When did Bob run a marathon?"] == ("D2:1",)
    assert evidence["What pets and sports?"] == ("D1:1", "D2:1")
    assert evidence["Would Ann like dogs?"] == ("D1:1",)
    assert conv.dropped_evidence == ("D9:9",)


def test_loader_answers_int_and_adversarial(sample_path):
    conv = load_locomo(sample_path).conversations[0]
    by_q = {q.question: q for q in conv.questions}
    assert by_q["How many years?"].answer == "2022"
    adversarial = by_q["What is Bob's cat called?"]
    assert adversarial.answer is None and adversarial.adversarial_answer == "Tom"


def test_loader_observation_ids_may_be_lists(sample_path):
    conv = load_locomo(sample_path).conversations[0]
    assert [o.dia_ids for o in conv.observations] == [("D1:1",), ("D1:3",), ("D2:1",)]


def test_loader_rejects_other_layouts(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a list"}')
    with pytest.raises(ConfigurationError):
        load_locomo(bad)
    with pytest.raises(ConfigurationError):
        load_locomo(tmp_path / "missing.json")


def test_normalize_evidence_cases():
    known = {"D8:6", "D9:17", "D11:26", "D30:5"}
    assert normalize_evidence("D8:6; D9:17", known) == (["D8:6", "D9:17"], [])
    assert normalize_evidence("D:11:26", known) == (["D11:26"], [])
    assert normalize_evidence("D30:05", known) == (["D30:5"], [])
    assert normalize_evidence("D", known) == ([], ["D"])


def test_f1_stems_with_snowball():
    """The scorer's stemmer is the library's Snowball English: inflections match."""
    assert f1_score("paintings", "painting") == 1.0
    assert f1_score("running", "run") == 1.0
    assert f1_score("generalizations", "general") == 1.0
    assert f1_score("ran", "run") == 0.0


def test_normalization_and_f1():
    assert normalize_answer("The cat, and a Dog!") == "cat dog"
    assert f1_score("paintings, the sea", "painting sea") == 1.0
    assert f1_score("blue", "red") == 0.0


def test_category_rules():
    assert score_answer("marathon", "puppy, marathon", 1) == 0.5
    assert score_answer("yes", "Yes; she adopted one", 3) == 1.0
    assert score_answer("Not mentioned in the conversation", None, 5) == 1.0
    assert score_answer("Tom", None, 5) == 0.0


def test_aggregate_with_and_without_category_5():
    result = aggregate([(1, 1.0), (2, 0.0), (5, 1.0), (5, 1.0)])
    assert result["overall"] == 0.75 and result["overall_no5"] == 0.5 and result["5"] == 1.0


@pytest.mark.skipif(not SHARED.is_file(), reason="shared LoCoMo-10 data not present")
def test_gold_scores_itself_one_on_categories_1_2_4():
    dataset = load_locomo(SHARED)
    assert len(dataset.conversations) == 10
    questions = [q for c in dataset.conversations for q in c.questions]
    assert len(questions) == 1986
    for q in questions:
        if q.category in (1, 2, 4):
            assert score_answer(q.answer or "", q.answer, q.category) == 1.0, q.question
    assert len(dataset.dropped_evidence) == 3
