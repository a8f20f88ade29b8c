"""`langmem-trpc backfill`: extract memories from past threads and transcripts (`langmem_trpc.backfill`)."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .._time import parse_flexible_time
from ..errors import ConfigurationError
from ..types import UserKey
from ._common import (
    CLI_LIMITS,
    db_option,
    default_db,
    emit,
    is_postgres,
    json_option,
    reports_errors,
    split_commas,
)
from ._output import safe
from .worker import _embeddings, _load, load_extractor

if TYPE_CHECKING:
    from ..history import BackfillProgress, BackfillReport, HistoryThread

__all__ = ["backfill_command", "open_checkpointer"]

logger = logging.getLogger(__name__)

LOG_EVERY = 5.0
"""Seconds between two progress lines when stderr is not a terminal."""


@contextmanager
def open_checkpointer(spec: str) -> Iterator[Any]:
    """A saver from SOURCE: a SqliteSaver file (opened read-only), a postgresql:// URL of a
    PostgresSaver, or MODULE:ATTR naming a saver (or a factory returning one)."""
    if is_postgres(spec):
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row

        with psycopg.connect(spec, autocommit=True, row_factory=dict_row) as conn:
            yield PostgresSaver(conn)  # type: ignore[arg-type]
        return
    path = Path(spec)
    if path.is_file():
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver

        lite = sqlite3.connect(
            f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False
        )
        try:
            saver = SqliteSaver(lite)
            saver.is_setup = True  # read-only: never create its tables
            yield saver
        finally:
            lite.close()
        return
    if ":" not in spec or spec.startswith(("/", ".")):
        raise click.UsageError(f"--checkpointer: no such file {spec!r}")
    forms = "a SqliteSaver file, a postgresql:// URL or MODULE:ATTR"
    yield _load(spec, "--checkpointer", forms, "list", "a checkpointer (no list method)")


def _time_option(value: str | None, name: str) -> datetime | None:
    if value is None:
        return None
    parsed = parse_flexible_time(value)
    if parsed is None:
        raise click.UsageError(f"--{name}: not a time (ISO 8601, e.g. 2025-01-31): {value!r}")
    return parsed


class Progress:
    """tqdm on a terminal (when installed), else a log line every `LOG_EVERY` seconds."""

    def __init__(self, total: int | None = None) -> None:
        self._bar: Any = None
        self._last = time.monotonic()
        if sys.stderr.isatty():
            try:
                from tqdm import tqdm

                self._bar = tqdm(total=total, unit="thread", file=sys.stderr, dynamic_ncols=True)
            except ImportError:
                pass

    def __call__(self, p: BackfillProgress) -> None:
        figures = {
            "batches": p.batches,
            "messages": p.messages,
            "tokens": p.input_tokens + p.output_tokens,
            "failures": p.failures,
        }
        if self._bar is not None:
            self._bar.total = p.threads_total
            self._bar.n = p.threads_done
            self._bar.set_postfix(figures, refresh=True)
            return
        now = time.monotonic()
        if now - self._last >= LOG_EVERY or p.threads_done == p.threads_total:
            self._last = now
            shown = ", ".join(f"{v} {k}" for k, v in figures.items())
            click.echo(f"backfill: {p.threads_done}/{p.threads_total} threads, {shown}", err=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def summary(report: BackfillReport, queued: bool = False) -> str:
    """The final summary, for people."""
    verb = "would extract" if report.dry_run else "extracted"
    lines = [
        f"{'dry run: ' if report.dry_run else ''}{report.threads} thread(s), "
        f"{report.threads_nothing_new} with nothing new, {len(report.skipped)} skipped",
        f"{verb} {report.messages} message(s) in {report.batches} batch(es)",
    ]
    if report.dry_run:
        lines.append(
            f"estimated {report.estimated_model_calls} model call(s), "
            f"~{report.estimated_input_tokens} input tokens"
        )
    elif queued:
        lines[-1] = f"queued {report.enqueued} thread(s) for langmem-trpc worker"
    else:
        lines.append(
            f"memories: {report.added} added, {report.updated} updated, {report.deleted} deleted, "
            f"{report.duplicates} duplicate(s); {report.model_calls} model call(s), "
            f"{report.input_tokens} input / {report.output_tokens} output tokens"
        )
    lines += [f"skipped {safe(s.thread_id)}: {s.reason}" for s in report.skipped]
    if report.dead_lettered:
        lines.append(f"{report.dead_lettered} batch(es) dead-lettered: langmem-trpc jobs failed")
    lines += [f"FAILED {safe(line)}" for line in report.failures]
    lines.append(f"{report.seconds:.1f} s")
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class BackfillSettings:
    """The backfill's tuning options, typed, built once from the command line (the
    names and defaults of `history.backfill`'s own arguments)."""

    batch_messages: int
    job_timeout: float
    claim_ttl: float | None
    max_attempts: int
    policy: str


def _threads(
    source: str | None,
    transcripts: tuple[str, ...],
    thread_id: str | None,
    app_name: str | None,
    user_id: str | None,
) -> list[HistoryThread] | None:
    """The threads of the `transcripts` files (a dump's thread and user named by
    `thread_id`, `app_name`, `user_id`), or None to read `source` (a checkpointer);
    exactly one of the two must be given."""
    from ..history import TranscriptError, read_transcripts

    if (source is None) == (not transcripts):
        raise click.UsageError("give exactly one of --checkpointer or --transcripts")
    if source is not None:
        return None
    user = UserKey(app_name or "default", user_id) if user_id else None
    threads: list[HistoryThread] = []
    problems: list[str] = []
    for path in transcripts:
        try:
            threads += read_transcripts(path, user=user, thread_id=thread_id)
        except TranscriptError as exc:
            problems += [f"{path}: {line}" for line in exc.problems]
    if problems:
        for line in problems:
            click.echo(safe(line), err=True)
        click.echo(f"Error: {len(problems)} problem(s); nothing was extracted", err=True)
        sys.exit(1)
    return threads


@click.command(name="backfill")
@click.option(
    "--checkpointer",
    "source",
    default=None,
    metavar="SOURCE",
    help="A SqliteSaver database file (read only), a postgresql:// URL of a "
    "PostgresSaver, or MODULE:ATTR naming any checkpointer.",
)
@click.option(
    "--transcripts",
    multiple=True,
    metavar="FILE",
    help="JSONL, one message a line (thread_id, app_name, user_id, role, content, "
    "timestamp[, id]); or a messages_to_dict JSON list with --thread, --app, --user. "
    "Repeatable.",
)
@db_option
@click.option(
    "--extractor", required=True, help="llm, verbatim, or MODULE:ATTR (as langmem-trpc worker)."
)
@click.option("--model", default=None, help="Chat model for --extractor llm (init_chat_model).")
@click.option(
    "--embeddings",
    default="none",
    show_default=True,
    help="Embeddings for the memories it writes, the same as your app's: none, "
    "local or MODULE:ATTR.",
)
@click.option(
    "--identity",
    default=None,
    metavar="MODULE:ATTR",
    help="A function (thread_id, checkpoint metadata) -> UserKey | None, for "
    "checkpoints whose runs carried no user_id.",
)
@click.option(
    "--app",
    "app_name",
    default=None,
    help="App name of threads whose runs named none; the app of a dump.",
)
@click.option("--user", "user_id", default=None, help="The user of a messages_to_dict dump.")
@click.option(
    "--thread", "thread_id", default=None, help="The thread id of a messages_to_dict dump."
)
@click.option(
    "--since", default=None, help="Only threads whose last message is at or after this time."
)
@click.option("--until", default=None, help="Only threads whose last message is before this time.")
@click.option(
    "--users", default=None, help="Only these users (comma-separated user_id or app/user)."
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Users processed at once (a user's threads run oldest first).",
)
@click.option(
    "--idle-gap",
    type=click.FloatRange(min=0),
    default=6.0,
    show_default=True,
    help="Hours between two messages that end a batch (0: off).",
)
@click.option("--batch-messages", type=click.IntRange(min=1), default=50, show_default=True)
@click.option(
    "--job-timeout", type=click.FloatRange(min=0, min_open=True), default=300.0, show_default=True
)
@click.option(
    "--claim-ttl",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds a thread claim lasts (default: 2 x job timeout).",
)
@click.option("--max-attempts", type=click.IntRange(min=1), default=3, show_default=True)
@click.option(
    "--policy",
    type=click.Choice(["merge_similar", "preserve_history", "append_only"]),
    default="merge_similar",
    show_default=True,
)
@click.option("--dry-run", is_flag=True, help="Print what would be extracted; write nothing.")
@click.option(
    "--queue",
    "use_queue",
    is_flag=True,
    help="Queue the threads for langmem-trpc worker (PostgreSQL --db).",
)
@click.option("--queue-name", default="langmem", show_default=True)
@json_option
@reports_errors
def backfill_command(
    source: str | None,
    transcripts: tuple[str, ...],
    db: str | None,
    extractor: str,
    model: str | None,
    embeddings: str,
    identity: str | None,
    app_name: str | None,
    user_id: str | None,
    thread_id: str | None,
    since: str | None,
    until: str | None,
    users: str | None,
    concurrency: int,
    idle_gap: float,
    batch_messages: int,
    job_timeout: float,
    claim_ttl: float | None,
    max_attempts: int,
    policy: str,
    dry_run: bool,
    use_queue: bool,
    queue_name: str,
    as_json: bool,
) -> None:
    """Bring your history: extract memories from past LangGraph threads or transcripts.

    Each thread goes through the live write path (cursor, claims, checkers,
    extraction, reconcile, dead letters), on its messages' own clocks: a
    second run extracts nothing, a live run afterwards only what is new, and a
    killed run started again resumes where it stopped. Exits 1 when a batch
    failed or a transcript did not validate (nothing of it is extracted).

    \b
    Examples:
        langmem-trpc backfill --checkpointer checkpoints.db --db memories.db \\
            --extractor llm --model openai:gpt-4o-mini --dry-run
        langmem-trpc backfill --transcripts export.jsonl --db memories.db --extractor verbatim
    """
    threads = _threads(source, transcripts, thread_id, app_name, user_id)
    settings = BackfillSettings(
        batch_messages=batch_messages,
        job_timeout=job_timeout,
        claim_ttl=claim_ttl,
        max_attempts=max_attempts,
        policy=policy,
    )
    options = _options(app_name, users, since, until, idle_gap, identity, concurrency, dry_run)
    chosen = load_extractor(extractor, model)
    with ExitStack() as stack:
        target = threads if source is None else stack.enter_context(open_checkpointer(source))
        service = _service(stack, db or default_db(), embeddings, dry_run, concurrency)
        if use_queue and not dry_run:
            options["queue"] = _queue(stack, db, queue_name, service)
        report = _run(target, service, chosen, options, settings)
    emit(report.as_dict(), as_json, lambda: summary(report, "queue" in options))
    if not report.ok:
        sys.exit(1)


def _options(
    app_name: str | None,
    users: str | None,
    since: str | None,
    until: str | None,
    idle_gap: float,
    identity: str | None,
    concurrency: int,
    dry_run: bool,
) -> dict[str, Any]:
    """`history.backfill`'s keyword arguments that the command line's options give
    converted (times parsed, hours to seconds, `--identity` loaded)."""
    options: dict[str, Any] = {
        "app_name": app_name,
        "users": split_commas(users) if users else None,
        "since": _time_option(since, "since"),
        "until": _time_option(until, "until"),
        "idle_gap": idle_gap * 3600 or None,
        "concurrency": concurrency,
        "dry_run": dry_run,
    }
    if identity is not None:
        options["identity"] = _load_identity(identity)
    return options


def _run(
    target: Any,
    service: Any,
    extractor: Any,
    options: dict[str, Any],
    settings: BackfillSettings,
) -> BackfillReport:
    from ..history import backfill

    progress = Progress()
    try:
        return backfill(
            target,
            service,
            extractor,
            progress=progress,
            batch_messages=settings.batch_messages,
            job_timeout=settings.job_timeout,
            claim_ttl=settings.claim_ttl,
            max_attempts=settings.max_attempts,
            policy=settings.policy,
            **options,
        )
    finally:
        progress.close()


def _load_identity(spec: str) -> Callable[..., Any]:
    import importlib

    module_name, _, attr = spec.partition(":")
    try:
        found = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigurationError(f"--identity {spec}: {exc}") from None
    if not callable(found):
        raise ConfigurationError(f"--identity {spec}: not a function")
    return found  # type: ignore[no-any-return]


def _service(stack: ExitStack, db: str, embeddings: str, dry_run: bool, concurrency: int) -> Any:
    """The memory store; a dry run opens it read only (None when it does not exist yet)."""
    from ..registry import open as open_store

    if dry_run:
        if not is_postgres(db) and not Path(db).exists() and "://" not in db:
            return None
        return stack.enter_context(open_store(db, create=False, limits=CLI_LIMITS))
    pool: dict[str, Any] = {"pool_size": concurrency + 2} if is_postgres(db) else {}
    service = open_store(db, embeddings=_embeddings(embeddings), limits=CLI_LIMITS, **pool)
    stack.callback(service.close)
    return service


def _queue(stack: ExitStack, db: str | None, name: str, service: Any) -> Any:
    from ..queue import PostgresJobQueue

    if db is None or not is_postgres(db):
        raise click.UsageError("--queue needs a PostgreSQL --db (postgresql://...)")
    queue = stack.enter_context(PostgresJobQueue(db, queue=name, pool_size=1, service=service))
    queue.setup()
    return queue
