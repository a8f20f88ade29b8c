"""`langmem-trpc worker`: a long-running consumer of the PostgreSQL job queue."""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from typing import Any

import click

from ..errors import ConfigurationError
from ._common import CLI_LIMITS, is_postgres, reports_errors

__all__ = ["load_extractor", "worker_command"]

READY = "langmem-trpc worker ready"
"""The line (on stderr) a worker prints each time it is connected and fetching jobs."""


def load_extractor(spec: str, model: str | None) -> Any:
    """`verbatim`, `llm` (with `model`, via `init_chat_model`) or `MODULE:ATTR` (`_load`)."""
    from ..extraction import LLMExtractor, VerbatimExtractor

    if spec == "verbatim":
        return VerbatimExtractor()
    if spec == "llm":
        if not model:
            raise click.UsageError("--extractor llm needs --model (e.g. openai:gpt-4o-mini)")
        from langchain.chat_models import init_chat_model

        return LLMExtractor(init_chat_model(model))
    forms = "llm, verbatim or MODULE:ATTR"
    return _load(spec, "--extractor", forms, "extract", "an extractor (no extract method)")


def _embeddings(spec: str) -> Any:
    """`none`, `local` (the bundled MiniLM) or `MODULE:ATTR` (LangChain `Embeddings`)."""
    if spec == "none":
        return None
    if spec == "local":
        from ..embeddings import LocalMiniLMEmbeddings, local_embeddings_available

        if not local_embeddings_available():
            raise ConfigurationError("--embeddings local needs the [local] extra and its weights")
        return LocalMiniLMEmbeddings()
    forms = "none, local or MODULE:ATTR"
    return _load(
        spec, "--embeddings", forms, "embed_documents", "an Embeddings (no embed_documents)"
    )


def _load(spec: str, option: str, forms: str, method: str, what: str) -> Any:
    """`MODULE:ATTR`: an object with a `method`, or a class / factory called without
    arguments that returns one."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise click.UsageError(f"{option} must be {forms}, not {spec!r}")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"{option} {spec}: {exc}") from None
    ready = callable(getattr(target, method, None)) and not isinstance(target, type)
    found = target if ready else target()
    if not callable(getattr(found, method, None)):
        raise ConfigurationError(f"{option} {spec}: not {what}")
    return found


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """The worker's tuning options, typed, built once from the command line (the names
    and defaults of `QueueWorker`'s own arguments, which `--help` documents)."""

    job_timeout: float
    claim_ttl: float | None
    stalled_after: float
    retries: int | None
    retry_wait: float
    max_attempts: int
    policy: str
    batch_messages: int
    poll_interval: float
    shutdown_timeout: float | None
    delete_succeeded: bool


def _ready(queue: str, apps: tuple[str, ...], concurrency: int) -> None:
    only = f" apps={','.join(apps)}" if apps else ""
    click.echo(
        f"{READY}: queue={queue}{only} concurrency={concurrency} pid={os.getpid()}", err=True
    )
    sys.stderr.flush()


@click.command(name="worker")
@click.option("--db", required=True, help="PostgreSQL connection string (queue and memories).")
@click.option(
    "--extractor",
    default="verbatim",
    show_default=True,
    help="llm, verbatim, or MODULE:ATTR (an extractor, or a class/factory returning one).",
)
@click.option("--model", default=None, help="Chat model for --extractor llm (init_chat_model).")
@click.option("--concurrency", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--queue", default="langmem", show_default=True, help="Queue name to consume.")
@click.option(
    "--app", "apps", multiple=True, help="Only this app's jobs (repeatable; default: every app's)."
)
@click.option(
    "--job-timeout", type=click.FloatRange(min=0, min_open=True), default=30.0, show_default=True
)
@click.option(
    "--claim-ttl",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds a job's thread claim lasts (default: 2 x job timeout, >= 60).",
)
@click.option(
    "--stalled-after",
    type=click.FloatRange(min=0, min_open=True),
    default=30.0,
    show_default=True,
    help="Seconds without heartbeat before another worker's running jobs are put back.",
)
@click.option(
    "--retries",
    type=click.IntRange(min=0),
    default=None,
    help="Attempts of one job before it is marked failed (default: max-attempts + 2).",
)
@click.option(
    "--retry-wait",
    type=click.FloatRange(min=0),
    default=2.0,
    show_default=True,
    help="First retry backoff in seconds (doubles, at most 300).",
)
@click.option(
    "--max-attempts",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Failed attempts on one batch before it is dead-lettered.",
)
@click.option(
    "--policy",
    type=click.Choice(["merge_similar", "preserve_history", "append_only"]),
    default="merge_similar",
    show_default=True,
)
@click.option("--batch-messages", type=click.IntRange(min=1), default=50, show_default=True)
@click.option(
    "--poll-interval",
    type=click.FloatRange(min=0, min_open=True),
    default=5.0,
    show_default=True,
    help="Seconds between polls when no notification arrives.",
)
@click.option(
    "--embeddings",
    default="none",
    show_default=True,
    help="Embeddings for the memories it writes, the same as your app's: none, local "
    "or MODULE:ATTR (an Embeddings, or a class/factory returning one).",
)
@click.option(
    "--shutdown-timeout",
    type=click.FloatRange(min=0),
    default=None,
    help="Seconds a stop waits for running jobs before putting them back "
    "(default: job timeout + 10).",
)
@click.option(
    "--delete-succeeded",
    is_flag=True,
    help="Delete a job's row once it succeeded (keeps procrastinate_jobs small).",
)
@click.option("--drain", is_flag=True, help="Exit once no job is due (backfills, tests).")
@reports_errors
def worker_command(
    db: str,
    extractor: str,
    model: str | None,
    concurrency: int,
    queue: str,
    apps: tuple[str, ...],
    job_timeout: float,
    claim_ttl: float | None,
    stalled_after: float,
    retries: int | None,
    retry_wait: float,
    max_attempts: int,
    policy: str,
    batch_messages: int,
    poll_interval: float,
    embeddings: str,
    shutdown_timeout: float | None,
    delete_succeeded: bool,
    drain: bool,
) -> None:
    """Consume the PostgreSQL job queue: extract memories for the queued threads.

    Runs until SIGTERM or Ctrl-C; then it stops fetching and lets running jobs
    finish (job timeout + 10 s), putting back the ones that do not. Start as many
    as you like, on as many machines: one user's jobs still run in order.
    With --app (repeatable) it takes only those apps' jobs, e.g. to give one app
    its own model or concurrency.
    Prints "langmem-trpc worker ready: ..." on stderr once connected.

    \b
    Example:
        langmem-trpc worker --db postgresql://localhost/app --extractor llm \\
            --model openai:gpt-4o-mini --concurrency 8
    """
    if not is_postgres(db):
        raise click.UsageError("--db must be a PostgreSQL connection string (postgresql://...)")
    settings = WorkerSettings(
        job_timeout=job_timeout,
        claim_ttl=claim_ttl,
        stalled_after=stalled_after,
        retries=retries,
        retry_wait=retry_wait,
        max_attempts=max_attempts,
        policy=policy,
        batch_messages=batch_messages,
        poll_interval=poll_interval,
        shutdown_timeout=shutdown_timeout,
        delete_succeeded=delete_succeeded,
    )
    _serve(
        db, load_extractor(extractor, model), embeddings, concurrency, queue, apps, settings, drain
    )


def _serve(
    db: str,
    extractor: Any,
    embeddings: str,
    concurrency: int,
    queue: str,
    apps: tuple[str, ...],
    settings: WorkerSettings,
    drain: bool,
) -> None:
    """Open the store and the queue at `db`, then run a `QueueWorker` until stopped
    (or, with `drain`, until no job is due)."""
    from ..queue import PostgresJobQueue, QueueWorker
    from ..registry import open as open_store

    service = open_store(
        db, embeddings=_embeddings(embeddings), limits=CLI_LIMITS, pool_size=concurrency + 2
    )
    try:
        with PostgresJobQueue(db, queue=queue, pool_size=1) as producer:
            producer.setup()
        worker = QueueWorker(
            db,
            service,
            extractor,
            queue=queue,
            apps=apps,
            concurrency=concurrency,
            on_ready=lambda: _ready(queue, apps, concurrency),
            job_timeout=settings.job_timeout,
            claim_ttl=settings.claim_ttl,
            stalled_after=settings.stalled_after,
            retries=settings.retries,
            retry_wait=settings.retry_wait,
            max_attempts=settings.max_attempts,
            policy=settings.policy,
            batch_messages=settings.batch_messages,
            poll_interval=settings.poll_interval,
            shutdown_timeout=settings.shutdown_timeout,
            delete_succeeded=settings.delete_succeeded,
        )
        worker.run(drain=drain)
    finally:
        service.close()
