"""Embedding speed of LocalMiniLMEmbeddings (numpy all-MiniLM-L6-v2): sentences per second.

Texts are LoCoMo turns (`Speaker: text`, typical chat lengths) when the data
file is there, else generated sentences of similar length. Three figures:
`embed_documents` in batches of 32 (the default), one text per call
(`embed_query`, what a search or a single `add` pays), and the model load.

    python benchmarks/bench_embeddings.py [--n 512] [--data ../shared/data/locomo10.json]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

from langmem_trpc.embeddings import LocalMiniLMEmbeddings

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo10.json"


def sample_texts(data: Path, n: int) -> list[str]:
    if data.is_file():
        from benchmarks.locomo.loader import load_locomo

        turns = [t for c in load_locomo(data).conversations for t in c.turns]
        step = max(1, len(turns) // n)
        return [f"{t.speaker}: {t.display_text}" for t in turns[::step][:n]]
    words = "memory search agent prefers dark mode hiking weekend painted sunset lake".split()
    return [" ".join(words[(i + j) % len(words)] for j in range(8 + i % 24)) for i in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=512, help="texts for the batch figure")
    parser.add_argument(
        "--single", type=int, default=128, help="texts for the one-at-a-time figure"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args()

    start = time.perf_counter()
    model = LocalMiniLMEmbeddings(batch_size=32)
    load_s = time.perf_counter() - start
    texts = sample_texts(args.data, args.n)
    pieces = [len(model._tokenizer.encode(t).ids) for t in texts]
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} logical CPUs; "
        f"{len(texts)} texts, word pieces mean {statistics.mean(pieces):.1f}, max {max(pieces)}"
    )
    print(f"model load: {load_s:.2f} s")
    model.embed_documents(texts[:32])  # warm-up

    batch_rates = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        model.embed_documents(texts)
        batch_rates.append(len(texts) / (time.perf_counter() - start))
    single = texts[: args.single]
    single_rates = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        for text in single:
            model.embed_query(text)
        single_rates.append(len(single) / (time.perf_counter() - start))
    print("| mode | texts | sentences/s (median of runs) | best |")
    print("| --- | --- | --- | --- |")
    print(
        f"| batch 32 | {len(texts)} | {statistics.median(batch_rates):.0f} | {max(batch_rates):.0f} |"
    )
    print(
        f"| single (embed_query) | {len(single)} | {statistics.median(single_rates):.0f} | "
        f"{max(single_rates):.0f} |"
    )


if __name__ == "__main__":
    main()
