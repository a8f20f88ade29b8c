"""`langmem-trpc reembed`: move a store to a new embedding model, online and resumable."""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from ..errors import ConfigurationError
from ..service.reembed import DEFAULT_BATCH, Reembeddable, ReembedProgress, ReembedReport
from ..types import UserKey
from ._common import DB_HELP, open_service, reports_errors, split_commas
from .worker import _embeddings

__all__ = ["reembed_command"]

LOG_EVERY = 5.0
"""Seconds between progress lines when stderr is not a terminal (or tqdm is missing)."""


class Progress:
    """tqdm on a terminal (when installed), else a line with rows/s and ETA every
    `LOG_EVERY` seconds."""

    def __init__(self) -> None:
        self._bar: Any = None
        self._last = time.monotonic()
        if sys.stderr.isatty():
            try:
                from tqdm import tqdm

                self._bar = tqdm(unit="memory", file=sys.stderr, dynamic_ncols=True)
            except ImportError:
                pass

    def __call__(self, p: ReembedProgress) -> None:
        if self._bar is not None:
            self._bar.total, self._bar.n = p.total, p.done
            self._bar.refresh()
            return
        now = time.monotonic()
        if now - self._last >= LOG_EVERY or p.done == p.total:
            self._last = now
            eta = "?" if p.eta_s is None else f"{p.eta_s:.0f}s"
            click.echo(
                f"reembed: {p.done}/{p.total} memories, {p.rate:.0f} rows/s, ETA {eta}", err=True
            )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def summary(report: ReembedReport) -> str:
    resumed = f" ({report.resumed} carried over from an earlier run)" if report.resumed else ""
    if report.cut_over:
        return (
            f"re-embedded {report.embedded} memories{resumed} in {report.seconds:.1f}s; "
            f"cut over to the new embedder (generation {report.generation}): reopen every "
            "service, worker and UI on this store with it"
        )
    if report.embedded == 0 and report.resumed == 0:
        return "the store already uses this embedder: nothing to do"
    return (
        f"embedded {report.embedded} memories{resumed}; not cut over yet: other users' "
        "memories lack a new vector (run again without --users)"
    )


@click.command(name="reembed")
@click.option("--db", required=True, help=DB_HELP)
@click.option(
    "--embeddings",
    "spec",
    required=True,
    metavar="local|MODULE:ATTR",
    help="The new embedder: local (the bundled MiniLM) or MODULE:ATTR "
    "(an Embeddings, or a class/factory returning one).",
)
@click.option(
    "--batch",
    default=DEFAULT_BATCH,
    show_default=True,
    type=click.IntRange(1),
    help="Texts per embedding call and per committed shadow batch.",
)
@click.option(
    "--app", "app_name", default="default", show_default=True, help="The application of --users."
)
@click.option(
    "--users",
    default="",
    help="Comma-separated user ids: embed only theirs "
    "(no cutover until every user's memories have a new vector).",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print how many texts would be embedded and their tokens; change nothing.",
)
@reports_errors
def reembed_command(
    db: str, spec: str, batch: int, app_name: str, users: str, dry_run: bool
) -> None:
    """Re-embed every memory (deleted ones too) with a new embedding model, online.

    Searches keep using the old vectors and embedder until one transaction cuts
    over; a killed run resumes when run again. Other processes holding the store
    with the old embedder refuse to search or write until reopened with the new one.

    \b
    Example:
        langmem-trpc reembed --db memories.db --embeddings mypkg.models:embedder --dry-run
        langmem-trpc reembed --db memories.db --embeddings mypkg.models:embedder
    """
    chosen = [UserKey(app_name, uid) for uid in split_commas(users)] or None
    with open_service(db) as service:
        if not isinstance(service, Reembeddable):
            raise ConfigurationError(
                f"--db: the {type(service).__name__} backend cannot re-embed a store"
            )
        if dry_run:
            found = service.reembed_plan(chosen)
            click.echo(f"dry run: {found.texts} texts, about {found.tokens} tokens to embed")
            return
        new = _embeddings(spec)
        if new is None:
            raise click.UsageError("--embeddings: name the new embedder (local or MODULE:ATTR)")
        progress = Progress()
        try:
            report = service.reembed(new, batch_size=batch, users=chosen, progress=progress)
        finally:
            progress.close()
        click.echo(summary(report))
