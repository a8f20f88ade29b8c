"""Plain numpy MiniLM baseline for LoCoMo retrieval, and the service's vector leg beside it.

The baseline embeds every turn as `Speaker: text` (image captions appended as
the harness's units do, `[shared <caption>]`) with `LocalMiniLMEmbeddings`,
embeds each question, and takes the numpy top-k by cosine: no service, no
fusion, no floors. The `service` rows run the same questions through
`InMemoryMemoryService.search(hybrid=False, similarity_threshold=0.0)` over the
harness's own turn units, which is what the harness's `turns-vector` arm does.
Both are scored with the harness's `question_metrics` / `summarize`
(categories 1-4, turn-level recall@k).

    python benchmarks/bench_locomo_vector_baseline.py [--data ../shared/data/locomo10.json]

Vectors are cached per text in `.bench/embeddings-numpy.sqlite`.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from benchmarks.locomo.loader import Conversation, load_locomo
from benchmarks.locomo.retrieval import RETRIEVAL_CATEGORIES, question_metrics, summarize
from benchmarks.locomo.units import conversation_units, ingest_units
from langmem_trpc import InMemoryMemoryService, SearchOptions, UserKey
from langmem_trpc.embeddings import CachedEmbeddings, LocalMiniLMEmbeddings

KS = (1, 5, 10, 20)
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo10.json"


def numpy_arm(convs: list[Conversation], emb: CachedEmbeddings, with_speaker: bool) -> list[dict]:
    records = []
    for conv in convs:
        turns = [t for t in conv.turns if t.display_text.strip()]
        texts = [
            f"{t.speaker}: {t.display_text}" if with_speaker else t.display_text for t in turns
        ]
        emb.prefetch(texts)
        matrix = np.asarray(emb.embed_documents(texts), dtype=np.float32)
        questions = [q for q in conv.questions if q.category in RETRIEVAL_CATEGORIES]
        emb.prefetch([q.question for q in questions])
        for q in questions:
            scores = matrix @ np.asarray(emb.embed_query(q.question), dtype=np.float32)
            top = np.argsort(-scores, kind="stable")[: max(KS)]
            ranked = [((turns[i].dia_id,), texts[i]) for i in top]
            records.append(_record(conv, q, ranked))
    return records


def service_arm(convs: list[Conversation], emb: CachedEmbeddings) -> list[dict]:
    records = []
    for conv in convs:
        service = InMemoryMemoryService(emb)
        user = UserKey("locomo-bench", conv.sample_id)
        units = conversation_units(conv, "turns")
        emb.prefetch([u.text for u in units])
        id_map = ingest_units(service, user, units)
        questions = [q for q in conv.questions if q.category in RETRIEVAL_CATEGORIES]
        emb.prefetch([q.question for q in questions])
        for q in questions:
            options = SearchOptions(
                query=q.question, max_results=max(KS), hybrid=False, similarity_threshold=0.0
            )
            hits = service.search(user, q.question, options)
            records.append(_record(conv, q, [(id_map.get(h.id, ()), h.text) for h in hits]))
    return records


def _record(conv: Conversation, q: object, ranked: list[tuple[tuple[str, ...], str]]) -> dict:
    return {
        "sample_id": conv.sample_id,
        "category": q.category,  # type: ignore[attr-defined]
        "evidence": list(q.evidence),  # type: ignore[attr-defined]
        "metrics": question_metrics(ranked, q.evidence, KS),  # type: ignore[attr-defined]
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--cache", type=Path, default=Path(".bench/embeddings-numpy.sqlite"))
    parser.add_argument(
        "--arms", default="numpy-speaker,numpy-plain,service", help="comma-separated arms"
    )
    args = parser.parse_args()
    convs = load_locomo(args.data).conversations
    emb = CachedEmbeddings(LocalMiniLMEmbeddings(), args.cache, "all-MiniLM-L6-v2/numpy")
    arms = {
        "numpy-speaker": lambda: numpy_arm(convs, emb, with_speaker=True),
        "numpy-plain": lambda: numpy_arm(convs, emb, with_speaker=False),
        "service": lambda: service_arm(convs, emb),
    }
    print(f"{len(convs)} conversations from {args.data}")
    print("| arm | questions | R@1 | R@5 | R@10 | R@20 | cat1 | cat2 | cat3 | cat4 | seconds |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in args.arms.split(","):
        start = time.perf_counter()
        summary = summarize(arms[name](), KS)
        took = time.perf_counter() - start
        r10 = summary["recall@10"]
        cats = " | ".join(f"{r10.get(str(c), 0.0):.3f}" for c in RETRIEVAL_CATEGORIES)
        recalls = " | ".join(f"{summary[f'recall@{k}']['overall']:.3f}" for k in KS)
        print(
            f"| {name} | {int(summary['questions']['overall'])} | {recalls} | {cats} | {took:.0f} |"
        )
    emb.close()


if __name__ == "__main__":
    main()
