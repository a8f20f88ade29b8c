"""Deterministic embeddings for tests: no model, no network, meaningful ranking."""

from __future__ import annotations

import hashlib

import numpy as np
from langchain_core.embeddings import Embeddings

from ..service.text import primary_tokens


class HashingEmbeddings(Embeddings):
    """Bag of hashed tokens (plus character trigrams), L2-normalised.

    Texts that share words get a high cosine similarity and unrelated texts
    a low one, so vector-ranking tests can assert an order.

    Args:
        size: vector dimension (384 matches all-MiniLM-L6-v2).
        trigram_weight: weight of character trigrams, which make "upgrade"
            and "upgraded" similar.
        seed: another seed hashes every feature elsewhere: a different "model" of the
            same dimension (for tests of embedder changes).
    """

    def __init__(self, size: int = 384, trigram_weight: float = 0.3, seed: str = "") -> None:
        self.size = size
        self.trigram_weight = trigram_weight
        self.seed = seed

    def _bucket(self, feature: str) -> tuple[int, float]:
        digest = hashlib.blake2b((self.seed + feature).encode(), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        return value % self.size, 1.0 if (value >> 63) & 1 else -1.0

    def embed(self, text: str) -> list[float]:
        vector = np.zeros(self.size, dtype=np.float64)
        for token in primary_tokens(text, stem=False):  # words as written: a stand-in for a model
            index, sign = self._bucket("w:" + token)
            vector[index] += sign
            padded = f"#{token}#"
            for i in range(len(padded) - 2):
                index, sign = self._bucket("c:" + padded[i : i + 3])
                vector[index] += sign * self.trigram_weight
        norm = float(np.linalg.norm(vector))
        if norm == 0:
            vector[0] = 1.0
            norm = 1.0
        return [float(x) for x in vector / norm]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed(text)
