"""Embedders the re-embed tests load by MODULE:ATTR (also in `langmem-trpc reembed` subprocesses)."""

from __future__ import annotations

import os
import time

from langmem_trpc.testing import HashingEmbeddings

old = HashingEmbeddings()
new = HashingEmbeddings(seed="new")
"""Another model of the same dimension."""
wide = HashingEmbeddings(size=768, seed="wide")
"""Another model of another dimension."""


class SlowNew(HashingEmbeddings):
    """`new`, sleeping per document batch (REEMBED_TEST_SLEEP seconds): a run to kill."""

    def __init__(self) -> None:
        super().__init__(seed="new")

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        time.sleep(float(os.environ.get("REEMBED_TEST_SLEEP", "0.2")))
        return super().embed_documents(texts)
