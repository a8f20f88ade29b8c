"""`langmem-trpc bench ...`: benchmark commands (mounted into the main CLI by the lead).

The LoCoMo harness is not part of the installed package: it lives in the source
repository's `benchmarks/locomo/`, which this command imports from the checkout an
editable install (`pip install -e .`) points at; an installed wheel says where to get it."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import click

from ..errors import ConfigurationError
from ._output import progress

__all__ = ["bench", "load_harness"]


FILE = click.Path(dir_okay=False, path_type=Path)
FOLDER = click.Path(file_okay=False, path_type=Path)
CHECKOUT = Path(__file__).resolve().parents[2]
"""The source checkout's root when the package is an editable install (else site-packages)."""
HARNESS_MISSING = (
    "the LoCoMo harness is not part of the installed package: it lives in the source "
    "repository's benchmarks/locomo/ folder. Clone the langmem-trpc repository, run "
    "`pip install -e .` in it, and run `langmem-trpc bench locomo` from that install"
)
REEMBED_FROM = "langmem_trpc.testing:HashingEmbeddings"
"""The default first embedder of the `turns-reembedded` arm: the test embedder, another
model of MiniLM's dimension (384), so every vector left on it would show in the recall."""


def load_harness(root: Path | None = None) -> ModuleType:
    """`benchmarks.locomo.command` from the checkout at `root` (default: `CHECKOUT`), or a
    one-line error saying where the harness lives (a wheel install has no benchmarks/)."""
    root = root or CHECKOUT
    if not (root / "benchmarks" / "locomo" / "command.py").is_file():
        raise click.ClickException(f"{HARNESS_MISSING} (no {root / 'benchmarks' / 'locomo'})")
    if str(root) not in sys.path:
        sys.path.append(str(root))
    module = importlib.import_module("benchmarks.locomo.command")
    found = Path(module.__file__ or "").resolve().parents[2]
    if found != root:
        raise click.ClickException(
            f"`benchmarks` imports from {found}, not from this checkout ({root}): "
            "run from outside that folder"
        )
    return module


@click.group()
def bench() -> None:
    """Benchmarks (LoCoMo, from a source checkout installed with `pip install -e .`).

    Example:

        langmem-trpc bench locomo --retrieval --out recall.json
    """


@bench.command()
@click.option(
    "--data",
    type=FILE,
    help="A file in the LoCoMo-10 layout (default: $LANGMEM_TRPC_LOCOMO, else a shared/data/locomo10.json or ./locomo10.json that exists).",
)
@click.option("--retrieval", is_flag=True, help="Offline retrieval evaluation (no LLM).")
@click.option(
    "--split",
    type=click.Choice(["dev", "test", "all"]),
    default="all",
    show_default=True,
    help="dev: the first half of the conversations (LoCoMo-10: 1-5), test: the rest (6-10).",
)
@click.option("--arms", help="Comma-separated arms (retrieval or QA arm names).")
@click.option("--ablation", is_flag=True, help="Also run the fusion ablations on the default arm.")
@click.option("--conversations", "sample_ids", help="Comma-separated sample ids (default: all).")
@click.option("--limit", type=int, help="Only the first N conversations.")
@click.option("--out", type=FILE, help="Write figures as JSON.")
@click.option(
    "--run-dir",
    type=FOLDER,
    default=Path(".bench/locomo"),
    help="Traces, embedding cache and stores (resumable).",
)
@click.option("--fresh", is_flag=True, help="Ignore finished traces in --run-dir (no resume).")
@click.option("--plots", type=FOLDER, help="Write PNG plots here.")
@click.option(
    "--backend",
    default="memory",
    show_default=True,
    help="Backend scheme for the stores: memory, sqlite (auto), or a file-based plugin's.",
)
@click.option("--model", help="Chat model name for QA arms (OpenAI-compatible, env configured).")
@click.option(
    "--top-k", default="10", show_default=True, help="QA retrieval depth; comma list = ablation."
)
@click.option(
    "--extract-model", help="Chat model for LLMExtractor in the memory-* arms (default: --model)."
)
@click.option(
    "--max-passes",
    type=click.IntRange(0, 10),
    default=3,
    show_default=True,
    help="memory-hybrid: most memory_search tool rounds before the answer.",
)
@click.option("--mem0-labels", is_flag=True, help="Label categories the way Mem0-style tables do.")
@click.option(
    "--reembed-from",
    default=REEMBED_FROM,
    show_default=True,
    metavar="SPEC",
    help="turns-reembedded: the embedder its stores are written with before the re-embed "
    "with MiniLM: local or MODULE:ATTR (an Embeddings, or a class/factory returning one).",
)
def locomo(**options: Any) -> None:
    """LoCoMo: offline retrieval recall (--retrieval) or QA arms with a chat model.

    QA arms: long-context, raw-turns, observations, memory-vector (LLMExtractor
    memories + vector search) and memory-hybrid (the same memories + default
    hybrid search + up to --max-passes memory_search tool calls).

    Example:

        langmem-trpc bench locomo --retrieval --split dev --ablation --out recall.json
        langmem-trpc bench locomo --arms memory-vector,memory-hybrid --out qa.json
    """
    harness = load_harness()
    harness.run_locomo(options, harness.Shell(progress, _first_embeddings))


def _first_embeddings(spec: str) -> Any:
    """The embedder the `turns-reembedded` arm writes its stores with (`--reembed-from`)."""
    from .worker import _embeddings as load_embeddings

    try:
        first = load_embeddings(spec)
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc), param_hint="--reembed-from") from exc
    if first is None:
        raise click.BadParameter(
            "name an embedder (local or MODULE:ATTR)", param_hint="--reembed-from"
        )
    return first
