"""`langmem-trpc jobs ...`: the write path's dead letters and, on PostgreSQL, the job queue."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from ..errors import BackendError, error_text
from ..types import DeadLetter
from ._common import db_option, emit, is_postgres, json_option, open_service, reports_errors

if TYPE_CHECKING:
    from ..queue import FailedJob, PostgresJobQueue, QueueStats

STATUS = click.Choice(["dead", "retry", "done", "all"])


JOB_PREFIX = "job:"
queue_option = click.option(
    "--queue", default="langmem", show_default=True, help="Queue name (PostgreSQL --db only)."
)


def letter_json(letter: DeadLetter) -> dict[str, Any]:
    data = letter.model_dump(mode="json", exclude={"messages"})
    data["messages"] = len(letter.messages)
    data["kind"] = "dead_letter"
    return data


def format_job(job: FailedJob) -> str:
    at = job.at.isoformat(timespec="seconds") if job.at else "-"
    return (
        f"job:{job.id}  {job.status:<7} {job.app_name}/{job.user_id} thread {job.thread_id!r}  "
        f"{job.messages} message(s)  attempts={job.attempts}  {at}"
    )


def format_stats(stats: QueueStats, queue: str) -> str:
    age = "-" if stats.oldest_pending_seconds is None else f"{stats.oldest_pending_seconds:.1f} s"
    lines = [
        f"queue {queue!r}: {stats.depth} waiting, {stats.running} running, "
        f"oldest waiting {age}, {stats.failed} failed, {stats.succeeded} succeeded"
    ]
    lines += [f"  app {app}: {count} waiting" for app, count in stats.per_app_depth.items()]
    lines += [f"  {user}: {count} unfinished" for user, count in stats.per_user_lag.items()]
    return "\n".join(lines)


@contextmanager
def open_queue(db: str | None, queue: str) -> Iterator[PostgresJobQueue]:
    from ..queue import PostgresJobQueue

    if db is None or not is_postgres(db):
        raise click.UsageError("the job queue needs a PostgreSQL --db (postgresql://...)")
    with PostgresJobQueue(db, queue=queue, pool_size=1) as q:
        yield q


NO_QUEUE = "no job queue in this database"


def has_queue(db: str) -> bool:
    """Whether the PostgreSQL database holds the job queue's tables (`PostgresJobQueue.setup`
    makes them); a service used with the in-process worker has only its dead letters."""
    import psycopg

    from ..backends.postgres import checked_conninfo

    conninfo = checked_conninfo(db)
    try:
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=10) as conn:
            row = conn.execute("SELECT to_regclass('procrastinate_jobs') IS NOT NULL").fetchone()
    except psycopg.Error as exc:
        raise BackendError(f"cannot read the PostgreSQL database: {error_text(exc)}") from exc
    return bool(row and row[0])


def format_letter(letter: DeadLetter) -> str:
    ids = ", ".join(letter.message_ids) or "(no ids)"
    return (
        f"{letter.id}  {letter.status.value:<5} {letter.app_name}/{letter.user_id} "
        f"thread {letter.thread_id!r}  {len(letter.messages)} message(s) [{ids}]  "
        f"attempts={letter.attempts}  {letter.updated_at.isoformat(timespec='seconds')}\n"
        f"    {letter.error}"
    )


@click.group()
def jobs() -> None:
    """The write path's failed batches (dead letters) and the PostgreSQL job queue."""


@jobs.command(name="status")
@db_option
@queue_option
@click.option(
    "--top",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Users shown in the per-user lag, most unfinished jobs first.",
)
@json_option
@reports_errors
def jobs_status(db: str | None, queue: str, top: int, as_json: bool) -> None:
    """The queue: waiting and running jobs, oldest waiting age, failed jobs, waiting jobs
    per app, per-user lag, and per user the model calls and tokens its jobs used.

    \b
    Example:
        langmem-trpc jobs status --db postgresql://localhost/app
    """
    import dataclasses

    from ..queue._stats import ProducerCounters

    if db is not None and is_postgres(db) and not has_queue(db):
        emit(
            {"queue": queue, "exists": False},
            as_json,
            lambda: f"queue {queue!r}: {NO_QUEUE} (dead letters: langmem-trpc jobs failed)",
        )
        return
    with open_queue(db, queue) as q:
        stats, costs = q.stats(top=top), q.costs(top=top)
    # the queue's figures, without this short-lived producer's counters
    hidden = {*ProducerCounters.NAMES, "extra"}
    data = {k: v for k, v in dataclasses.asdict(stats).items() if k not in hidden}

    def text() -> str:
        return "\n".join([format_stats(stats, queue), *format_costs(costs)])

    emit({"queue": queue, **data, "costs": costs}, as_json, text)


def format_costs(costs: dict[str, dict[str, int]]) -> list[str]:
    """Per-user model cost lines of `jobs status` (jobs that called a model only)."""
    return [
        f"  {user}: {c['model_calls']} model call(s) in {c['jobs']} job(s), "
        f"{c['input_tokens']} input / {c['output_tokens']} output tokens"
        for user, c in costs.items()
    ]


@jobs.command(name="failed")
@db_option
@click.option("--app", "app_name", default=None, help="Only this application (default: all).")
@click.option(
    "--status",
    type=STATUS,
    default="dead",
    show_default=True,
    help="dead: given up on; retry: queued for the thread's next job; done: retried successfully.",
)
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most this many.")
@queue_option
@json_option
@reports_errors
def jobs_failed(
    db: str | None,
    app_name: str | None,
    status: str,
    limit: int | None,
    queue: str,
    as_json: bool,
) -> None:
    """List dead letters, oldest first: batches the worker gave up on after its attempts.

    Each shows its id, user, thread, message ids, attempts and last error; the
    thread's cursor has moved past it, so later messages were still extracted.
    On PostgreSQL the queue's jobs that failed every retry follow (ids `job:<n>`;
    with --status dead or all); their thread's cursor has not moved past them.

    \b
    Example:
        langmem-trpc jobs failed --db memories.db --json
    """
    with open_service(db) as svc:
        letters = svc.dead_letters(
            app_name, status=None if status == "all" else status, limit=limit
        )
    failed: list[FailedJob] = []
    notes: list[str] = []
    if db is not None and is_postgres(db) and status in ("dead", "all"):
        if not has_queue(db):
            notes.append(NO_QUEUE)
        else:
            with open_queue(db, queue) as q:
                failed = [
                    j for j in q.failed_jobs(limit=limit or 1000) if app_name in (None, j.app_name)
                ]
    lines = [format_letter(d) for d in letters] + [format_job(j) for j in failed]
    emit(
        [letter_json(d) for d in letters] + [j.as_json() for j in failed],
        as_json,
        lambda: "\n".join((lines or ["no dead letters"]) + notes),
    )


@jobs.command(name="retry")
@db_option
@queue_option
@json_option
@click.argument("letter_id")
@reports_errors
def jobs_retry(db: str | None, as_json: bool, letter_id: str, queue: str) -> None:
    """Queue a dead letter for retry: the next worker job on its thread extracts it first.

    A queue job id (`job:<n>`, from `jobs failed` on PostgreSQL) is put back in the
    queue instead, due now, for one more attempt.

    A retry that fails again makes it dead again, with one more attempt.

    \b
    Example:
        langmem-trpc jobs retry --db memories.db 3f2a9c...
    """
    if letter_id.startswith(JOB_PREFIX):
        retry_queue_job(db, queue, letter_id, as_json)
        return
    with open_service(db) as svc:
        letter = svc.retry_dead_letter(letter_id)
    if letter is None:
        raise click.ClickException(
            f"letter_id: no dead letter {letter_id!r} to retry (unknown, or already done)"
        )
    emit(
        letter_json(letter),
        as_json,
        lambda: f"queued for retry on the next job of thread {letter.thread_id!r}: {letter.id}",
    )


def retry_queue_job(db: str | None, queue: str, ref: str, as_json: bool) -> None:
    number = ref[len(JOB_PREFIX) :]
    if not number.isdigit():
        raise click.ClickException(f"letter_id: {ref!r} is not a queue job id (job:<number>)")
    with open_queue(db, queue) as q:
        done = q.retry_failed(int(number))
    if not done:
        raise click.ClickException(
            f"letter_id: no failed job {ref!r} in queue {queue!r} (unknown, or not failed)"
        )
    emit({"kind": "queue_job", "id": ref, "status": "todo"}, as_json, lambda: f"{ref} queued again")
