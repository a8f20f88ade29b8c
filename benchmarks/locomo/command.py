"""`langmem-trpc bench locomo`, the run itself: data, arms, stores, payload.

The command's options live in `langmem_trpc.cli.bench`, which imports this module
from the source checkout (the harness is not part of the installed package)."""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from langmem_trpc.errors import ConfigurationError
from langmem_trpc.types import FUSION_STEPS_OFF

from .loader import LOCOMO_SOURCE, Conversation, Split, load_locomo

__all__ = ["ABLATIONS", "Shell", "check_extras", "default_data", "run_locomo"]


SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "locomo10.json"

ABLATIONS: dict[str, dict[str, Any]] = {
    "plain-rrf": {"fusion_method": "rrf", "fusion": FUSION_STEPS_OFF},
    "plain-scores": {"fusion_method": "scores", "fusion": FUSION_STEPS_OFF},
    "rrf": {"fusion_method": "rrf"},
    "rrf-k1": {"fusion_method": "rrf", "rrf_k": 1},
    "scores": {"fusion_method": "scores"},
    "no-question-words": {"fusion": {"question_word_weight": 1.0}},
    "no-time-preference": {"fusion": {"time_boost": 0.0}},
    "no-when-preference": {"fusion": {"when_boost": 0.0}},
    "no-participants": {"fusion": {"participant_boost": 0.0}},
    "no-session-context": {"fusion": {"context_weight": 0.0}},
    "decompose": {"fusion": {"decompose_weight": 1.0}},
    "neighbours": {"fusion": {"neighbour_weight": 0.25}},
    "feedback": {"fusion": {"feedback_weight": 0.25}},
    "session-first": {"fusion": {"session_weight": 0.5}},
    "capped-neighbours": {"fusion": {"neighbour_weight": 0.25, "neighbour_capped": True}},
    "reply-neighbours": {"fusion": {"neighbour_weight": 0.25, "neighbour_replies_only": True}},
    "implied-time": {"fusion": {"implied_time_boost": 1.0}},
    "session-diversity": {"fusion": {"session_diversity": 0.1}},
    "no-name-masking": {"fusion": {"mask_names": False}},
    "period-fetch": {"fusion": {"period_fetch": True}},
    "pool-30": {"fusion": {"min_pool": 30}},
}
"""SearchOptions overrides of the default arm, one step or choice at a time."""


def default_data() -> Path:
    """$LANGMEM_TRPC_LOCOMO, else the first shared/data/locomo10.json (beside the source
    checkout, the working directory or its parent) or ./locomo10.json that exists."""
    if env := os.environ.get("LANGMEM_TRPC_LOCOMO"):
        return Path(env)
    cwd = Path.cwd()
    shared = [d / "shared" / "data" / "locomo10.json" for d in (cwd, cwd.parent)]
    candidates = [SHARED_DATA, *shared, cwd / "locomo10.json"]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    looked = ", ".join(str(c) for c in dict.fromkeys(candidates))
    raise click.ClickException(
        f"no LoCoMo data found (looked in {looked}); pass --data PATH/locomo10.json "
        f"or set LANGMEM_TRPC_LOCOMO. {LOCOMO_SOURCE}"
    )


def check_extras(retrieval: bool, arms: str | None, plots: Path | None) -> None:
    """Stop before any work, in one line, when the run needs a module of the `[bench]`
    extra that is not installed (bm25s for the `turns-bm25s` baseline arm, which the
    retrieval run includes unless --arms leaves it out; matplotlib for --plots)."""
    from importlib.util import find_spec

    from .retrieval import default_arms

    needed: dict[str, str] = {}
    if retrieval:
        wanted = set(arms.split(",")) if arms else None
        for arm in default_arms():
            if arm.baseline == "bm25s" and (wanted is None or arm.name in wanted):
                needed["bm25s"] = f"the {arm.name} arm"
    if plots is not None:
        needed["matplotlib"] = "--plots"
    missing = [f"{module} (for {why})" for module, why in needed.items() if not find_spec(module)]
    if missing:
        raise click.ClickException(
            f"missing {', '.join(missing)}: pip install 'langmem-trpc[bench]'"
            + (" (or leave it out with --arms)" if "bm25s" in needed and missing else "")
        )


def _service_factory(backend: str, workdir: Path) -> Any:
    """Fresh unlimited stores (any conversation fits): `memory://`, or a new
    `workdir/store-N.<scheme>` for a registered file-based scheme ("auto": sqlite)."""
    from langmem_trpc.registry import default_registry
    from langmem_trpc.registry import open as open_store
    from langmem_trpc.service.rules import Limits

    limits = Limits(capacity=None)
    scheme = "sqlite" if backend == "auto" else backend.lower()
    if scheme not in default_registry.schemes():
        raise click.BadParameter(
            f"{backend!r}; registered: {', '.join(default_registry.schemes())}",
            param_hint="--backend",
        )
    counter = itertools.count()

    def make(embeddings: Any) -> Any:
        if scheme == "memory":
            return open_store("memory://", embeddings=embeddings, limits=limits)
        path = workdir / f"store-{next(counter)}.{scheme}"
        if path.is_dir():
            shutil.rmtree(path)
        path.unlink(missing_ok=True)
        return open_store(f"{scheme}://{path}", embeddings=embeddings, limits=limits)

    return make


def _embeddings(run_dir: Path, needed: bool) -> Any:
    if not needed:
        return None
    from langmem_trpc.embeddings import (
        CachedEmbeddings,
        LocalMiniLMEmbeddings,
        local_embeddings_available,
    )

    if not local_embeddings_available():
        return None
    return CachedEmbeddings(
        LocalMiniLMEmbeddings(), run_dir.parent / "embeddings.sqlite", "all-MiniLM-L6-v2"
    )


@dataclass(frozen=True)
class Shell:
    """What the CLI lends the run: its progress display and its `--reembed-from` loader."""

    progress: Callable[[Iterable[Any], str, int], Iterator[Any]]
    load_embedder: Callable[[str], Any]


def run_locomo(options: dict[str, Any], shell: Shell) -> None:
    """The `bench locomo` command with its parsed `options` (the click parameters)."""
    o = options
    check_extras(o["retrieval"], o["arms"], o["plots"])
    path = o["data"] or default_data()
    try:
        dataset = load_locomo(path)
    except ConfigurationError as exc:
        raise click.ClickException(str(exc)) from exc
    split: Split = o["split"]
    convs = dataset.select(
        o["sample_ids"].split(",") if o["sample_ids"] else None, o["limit"], split
    )
    dropped = dataset.dropped_evidence
    click.echo(
        f"split {split}: {len(convs)} conversations ({', '.join(c.sample_id for c in convs)}), "
        f"{sum(len(c.questions) for c in convs)} questions from {path}; "
        f"dropped {len(dropped)} unresolvable evidence ids: {dropped}"
    )
    run_dir: Path = o["run_dir"]
    run_dir.mkdir(parents=True, exist_ok=True)
    payload: dict[str, Any] = {
        "dataset": {
            "path": str(path),
            "split": split,
            "conversations": [c.sample_id for c in convs],
            "dropped_evidence": [list(d) for d in dropped],
        },
        "arms": {},
    }
    if o["retrieval"]:
        stores = (o["backend"], o["reembed_from"])
        _run_retrieval(convs, o["arms"], o["ablation"], run_dir, o["fresh"], stores, payload, shell)
    else:
        models = (o["model"], o["extract_model"], o["max_passes"])
        _run_qa(convs, o["arms"], run_dir, o["backend"], models, o["top_k"], payload, shell)
    _report(payload, o["out"], o["plots"], o["mem0_labels"])


def _report(payload: dict[str, Any], out: Path | None, plots: Path | None, mem0: bool) -> None:
    """The recall tables on stdout, then the --out JSON and the --plots PNGs."""
    from .report import markdown_tables, plot_results, write_json

    if payload["arms"] and any("recall@10" in a for a in payload["arms"].values()):
        click.echo(markdown_tables(payload, mem0=mem0))
    if out is not None:
        write_json(out, payload)
        click.echo(f"wrote {out}")
    if plots is not None and payload["arms"]:
        for png in plot_results(payload, plots):
            click.echo(f"wrote {png}")


def _run_retrieval(
    convs: list[Conversation],
    arms: str | None,
    ablation: bool,
    run_dir: Path,
    fresh: bool,
    stores: tuple[str, str],
    payload: dict[str, Any],
    shell: Shell,
) -> None:
    """`stores`: the --backend scheme and the --reembed-from embedder."""
    from .retrieval import run_retrieval

    backend, reembed_from = stores
    chosen = _retrieval_arms(arms, ablation)
    embeddings = _embeddings(run_dir, any(a.embed for a in chosen))
    if embeddings is None and any(a.embed for a in chosen):
        from langmem_trpc.embeddings import INSTALL_HINT

        click.echo(
            f"local embeddings are missing ({INSTALL_HINT}); running the keyword-only arm alone"
        )
        chosen = [a for a in chosen if not a.embed]
    if embeddings is not None:
        from .units import unit_texts

        for conv in convs:
            units = {a.units for a in chosen if a.embed}
            embeddings.prefetch(
                [t for u in units for t in unit_texts(conv, u)]
                + [q.question for q in conv.questions]
            )
    first = shell.load_embedder(reembed_from) if any(a.reembed for a in chosen) else None
    results = run_retrieval(
        convs,
        chosen,
        _service_factory(backend, run_dir),
        embeddings,
        run_dir / "retrieval",
        progress=shell.progress,
        resume=not fresh,
        first_embeddings=first,
        # The in-memory backend cannot re-embed: that arm's stores are SQLite files then.
        make_reembeddable=_service_factory("sqlite" if backend == "memory" else backend, run_dir),
    )
    if first is not None:
        payload["reembed_from"] = reembed_from
    payload["arms"].update(results)
    payload["default_arm"] = next(
        (a.name for a in chosen if a.is_default and a.units == "turns"), None
    )


def _retrieval_arms(arms: str | None, ablation: bool) -> list[Any]:
    """The arms `--arms` names (all by default), plus the ablation rows with `--ablation`."""
    from .retrieval import RetrievalArm, default_arms

    chosen = default_arms()
    if arms:
        wanted = arms.split(",")
        chosen = [a for a in chosen if a.name in wanted]
    if ablation:
        chosen += [
            RetrievalArm(f"turns-default/{name}", "turns", True, knobs, f"ablation: {knobs}")
            for name, knobs in ABLATIONS.items()
        ]
        plain = "ablation: turns without context topics (VerbatimExtractor(context=False))"
        chosen.append(
            RetrievalArm("turns-default/no-context-units", "turns-plain", True, {}, plain)
        )
    return chosen


def _qa_embeddings(run_dir: Path, chosen: list[str]) -> tuple[Any, str | None]:
    """MiniLM when the [local] extra is installed; the memory arms fall back to hashing."""
    embeddings = _embeddings(run_dir, any(a != "long-context" for a in chosen))
    if embeddings is not None:
        return embeddings, "all-MiniLM-L6-v2"
    if any(a.startswith("memory-") for a in chosen):
        from langmem_trpc.embeddings import INSTALL_HINT
        from langmem_trpc.testing import HashingEmbeddings

        click.echo(
            f"local embeddings are missing ({INSTALL_HINT}); the memory arms use HashingEmbeddings "
            "(token hashing, no semantics), so their vector figures are not comparable"
        )
        return HashingEmbeddings(), "hashing (fallback)"
    return None, None


def _run_qa(
    convs: list[Conversation],
    arms: str | None,
    run_dir: Path,
    backend: str,
    models: tuple[str | None, str | None, int],
    top_k: str,
    payload: dict[str, Any],
    shell: Shell,
) -> None:
    from .qa import QA_ARMS, chat_model_from_env, run_qa

    answer_model, extract_name, max_passes = models  # names: the endpoint comes from the env
    model = chat_model_from_env(answer_model)
    if model is None:
        click.echo(
            "QA arms need a chat model: set OPENAI_API_KEY (and OPENAI_BASE_URL / --model for other "
            "OpenAI-compatible servers). Nothing to do; use --retrieval for the offline evaluation."
        )
        return
    chosen = arms.split(",") if arms else list(QA_ARMS)
    unknown = [a for a in chosen if a not in QA_ARMS]
    if unknown:
        raise click.ClickException(f"unknown QA arm(s) {unknown}; choose from {list(QA_ARMS)}")
    embeddings, embedder = _qa_embeddings(run_dir, chosen)
    extract_model = None
    if any(a.startswith("memory-") for a in chosen):
        # extraction emits many tool calls and the hybrid arm's searches need room too
        extract_model = chat_model_from_env(extract_name or answer_model, max_tokens=4096)
    tool_model = chat_model_from_env(answer_model, max_tokens=256)
    extraction_dir = run_dir / "qa" / "extraction" / _slug(extract_name or answer_model)
    for arm in chosen:
        for k in [int(x) for x in top_k.split(",")] if arm != "long-context" else [0]:
            name = arm if k in (0, 10) else f"{arm}@{k}"
            summary = run_qa(
                convs,
                arm,
                (tool_model if arm == "memory-hybrid" else model) or model,
                _service_factory(backend, run_dir),
                embeddings,
                run_dir / "qa" / f"{name}.jsonl",
                top_k=k or 10,
                progress=shell.progress,
                extract_model=extract_model,
                extraction_dir=extraction_dir,
                max_passes=max_passes,
            )
            embedded = {} if arm == "long-context" else {"embedder": embedder}
            payload["arms"][name] = {"qa": summary, **embedded}
            click.echo(f"{name}: {summary.get('f1')} {summary.get('cost')}")
    payload["default_arm"] = next((a for a in ("raw-turns", "memory-hybrid") if a in chosen), None)


def _slug(model: str | None) -> str:
    """The extraction cache folder of one extraction model (by its name)."""
    return "".join(c if c.isalnum() or c in "-._" else "_" for c in model or "model")
