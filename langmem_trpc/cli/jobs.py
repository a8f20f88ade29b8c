"""`langmem-trpc jobs ...`: the write path's dead letters: list them, queue a retry."""

from __future__ import annotations

from typing import Any

import click

from ..types import DeadLetter
from ._common import db_option, emit, json_option, open_service, reports_errors

STATUS = click.Choice(["dead", "retry", "done", "all"])


def letter_json(letter: DeadLetter) -> dict[str, Any]:
    data = letter.model_dump(mode="json", exclude={"messages"})
    data["messages"] = len(letter.messages)
    return data


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
    """The write path's failed batches (dead letters)."""


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
@json_option
@reports_errors
def jobs_failed(
    db: str | None, app_name: str | None, status: str, limit: int | None, as_json: bool
) -> None:
    """List dead letters, oldest first: batches the worker gave up on after its attempts.

    Each shows its id, user, thread, message ids, attempts and last error; the
    thread's cursor has moved past it, so later messages were still extracted.

    \b
    Example:
        langmem-trpc jobs failed --db memories.db --json
    """
    with open_service(db) as svc:
        letters = svc.dead_letters(
            app_name, status=None if status == "all" else status, limit=limit
        )
    emit(
        [letter_json(d) for d in letters],
        as_json,
        lambda: "\n".join(format_letter(d) for d in letters) or "no dead letters",
    )


@jobs.command(name="retry")
@db_option
@json_option
@click.argument("letter_id")
@reports_errors
def jobs_retry(db: str | None, as_json: bool, letter_id: str) -> None:
    """Queue a dead letter for retry: the next worker job on its thread extracts it first.

    A retry that fails again makes it dead again, with one more attempt.

    \b
    Example:
        langmem-trpc jobs retry --db memories.db 3f2a9c...
    """
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
