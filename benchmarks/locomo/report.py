"""Results as JSON (the documented schema), Markdown tables and PNG plots.

JSON schema (`--out`)::

    {"default_arm": NAME,
     "dataset": {...counts, dropped evidence...},
     "arms": {NAME: {"recall@10": {"overall": x, "1": x, "2": x, "3": x, "4": x},
                     "recall@k" / "any@k" / "all@k" / "tokens@k" for k in 1,3,5,10,20,
                     "mrr": {...}, "questions": {"overall": n},
                     "qa": {"f1": {"1".."5", "overall", "overall_no5"}, "cost": {...}}  # QA arms only
                     ...}}}

A QA arm's `cost` is `qa.summarize_qa`'s (per-question tokens, calls,
latency; extraction and totals for the memory arms, which also name their
`embedder`: "all-MiniLM-L6-v2" or "hashing (fallback)"). `default_arm` of a
QA run is `raw-turns` when run, else `memory-hybrid`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .loader import CATEGORY_NAMES, MEM0_LABELS

__all__ = ["markdown_tables", "plot_results", "write_json"]

CATS = ("1", "2", "3", "4")

PUBLISHED_KS = (5, 10, 20, 25, 50)
PUBLISHED: dict[str, dict[int, float]] = {
    "LoCoMo paper: DRAGON over dialog turns": {5: 0.604, 10: 0.696, 25: 0.797},
    "LoCoMo paper: DRAGON over observations": {10: 0.661, 50: 0.747},
}
"""Published retrieval baselines on the same metric (recall@k of evidence turns, categories
1-4): the LoCoMo paper's Table 3 (ACL 2024) as recomputed over categories 1-4 by category
size in issue 29; not re-derived here. Retrieval units differ in size (a turn, an
observation), so compare at equal k with care."""


def write_json(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, sort_keys=True), encoding="utf-8")


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def markdown_tables(
    payload: dict[str, Any], ks: tuple[int, ...] = (1, 3, 5, 10, 20), mem0: bool = False
) -> str:
    """Recall tables per arm (by category number with names), the same figures as the JSON."""
    names = MEM0_LABELS if mem0 else CATEGORY_NAMES
    lines = [
        "| arm | "
        + " | ".join(f"cat {c} {names[int(c)]}" for c in CATS)
        + " | overall (1-4) | MRR | tokens@10 |"
    ]
    lines.append("| --- " * (len(CATS) + 4) + "|")
    arms = {a: d for a, d in payload["arms"].items() if "recall@10" in d}  # QA arms have none
    for arm, data in arms.items():
        r = data["recall@10"]
        mark = " (default)" if arm == payload.get("default_arm") else ""
        lines.append(
            f"| {arm}{mark} | "
            + " | ".join(_fmt(r.get(c)) for c in CATS)
            + f" | {_fmt(r.get('overall'))} | {_fmt(data['mrr'].get('overall'))} | {data['tokens@10']['overall']:.0f} |"
        )
    lines += [
        "",
        "| arm | " + " | ".join(f"R@{k}" for k in ks) + " | any@10 | all@10 |",
        "| --- " * (len(ks) + 3) + "|",
    ]
    for arm, data in arms.items():
        lines.append(
            f"| {arm} | "
            + " | ".join(_fmt(data[f"recall@{k}"].get("overall")) for k in ks)
            + f" | {_fmt(data['any@10'].get('overall'))} | {_fmt(data['all@10'].get('overall'))} |"
        )
    return "\n".join(lines + _published_table(arms)) if arms else "\n".join(lines)


def _published_table(arms: dict[str, Any]) -> list[str]:
    """Our arms beside `PUBLISHED` at the depths either reports ("-": not measured)."""
    lines = [
        "",
        "| retriever | " + " | ".join(f"R@{k}" for k in PUBLISHED_KS) + " |",
        "| --- " * (len(PUBLISHED_KS) + 1) + "|",
    ]
    for name, figures in PUBLISHED.items():
        cells = " | ".join(_fmt(figures.get(k)) for k in PUBLISHED_KS)
        lines.append(f"| {name} (issue 29's recomputation) | {cells} |")
    for arm, data in arms.items():
        cells = " | ".join(_fmt(data.get(f"recall@{k}", {}).get("overall")) for k in PUBLISHED_KS)
        lines.append(f"| {arm} | {cells} |")
    return lines


def plot_results(
    payload: dict[str, Any], out_dir: Path, ks: tuple[int, ...] = (1, 3, 5, 10, 20)
) -> list[Path]:
    """recall@k curves per arm and recall@10 vs retrieved tokens (needs the [bench] extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        from langmem_trpc.errors import ConfigurationError

        raise ConfigurationError(
            "plots need the [bench] extra: pip install 'langmem-trpc[bench]'"
        ) from exc
    out_dir.mkdir(parents=True, exist_ok=True)
    arms = {a: d for a, d in payload["arms"].items() if "recall@10" in d}
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for arm, data in arms.items():
        ax.plot(ks, [data[f"recall@{k}"]["overall"] for k in ks], marker="o", label=arm)
    ax.set_xlabel("k (retrieved units)")
    ax.set_ylabel("evidence recall@k (cats 1-4)")
    ax.set_xticks(list(ks))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("LoCoMo-10 offline retrieval: recall@k")
    curve = out_dir / "locomo-recall-at-k.png"
    fig.tight_layout()
    fig.savefig(curve, dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for arm, data in arms.items():
        xs = [data[f"tokens@{k}"]["overall"] for k in ks]
        ys = [data[f"recall@{k}"]["overall"] for k in ks]
        ax.plot(xs, ys, marker="o", label=arm)
    ax.set_xlabel("retrieved tokens per question (chars/4)")
    ax.set_ylabel("evidence recall (cats 1-4)")
    ax.set_xscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Recall vs retrieved tokens (points: k = 1, 3, 5, 10, 20)")
    tokens = out_dir / "locomo-recall-vs-tokens.png"
    fig.tight_layout()
    fig.savefig(tokens, dpi=120)
    plt.close(fig)
    return [curve, tokens]
