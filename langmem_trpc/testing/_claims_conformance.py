"""Conformance for thread claims, failed attempts and dead letters (mixed into
`MemoryServiceConformance`, so every backend runs them, sync and async)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ..errors import InvalidInputError
from ..types import DeadLetter, DeadLetterStatus, ExtractionCursor, UserKey
from ._kit import ALICE, BOB, T0, refused

if TYPE_CHECKING:
    from ._kit import Client


def _letter(user: UserKey = ALICE, thread: str = "t1", letter_id: str = "dl-1") -> DeadLetter:
    return DeadLetter(
        id=letter_id,
        app_name=user.app_name,
        user_id=user.user_id,
        thread_id=thread,
        error="ExtractionError: content filter",
        attempts=3,
        message_ids=["m1"],
        messages=[{"type": "human", "data": {"content": "poison", "id": "m1", "type": "human"}}],
        created_at=T0,
        updated_at=T0,
    )


def _cursor(count: int, thread: str = "t1") -> ExtractionCursor:
    return ExtractionCursor(
        thread_id=thread, message_count=count, message_keys=bytes(range(8)) * count
    )


class ClaimsConformance:
    async def test_a_claim_excludes_other_owners_until_released(self, client: Client) -> None:
        first = await client.claim_thread(ALICE, "t1", "owner-a", 30)
        assert first is not None and first.cursor is None and first.retries == []
        assert await client.claim_thread(ALICE, "t1", "owner-b", 30) is None
        assert await client.claim_thread(ALICE, "t1", "owner-a", 30) is not None  # renew
        assert await client.claim_thread(ALICE, "t2", "owner-b", 30) is not None
        assert await client.claim_thread(BOB, "t1", "owner-b", 30) is not None
        await client.release_thread(ALICE, "t1", "owner-b")  # not the holder: no effect
        assert await client.claim_thread(ALICE, "t1", "owner-b", 30) is None
        await client.release_thread(ALICE, "t1", "owner-a")
        assert await client.claim_thread(ALICE, "t1", "owner-b", 30) is not None

    async def test_an_expired_claim_is_taken_over(self, client: Client) -> None:
        # 1 s: the refusal must come within the ttl on a loaded machine too
        assert await client.claim_thread(ALICE, "t1", "dead-job", 1.0) is not None
        assert await client.claim_thread(ALICE, "t1", "next-job", 30) is None
        await asyncio.sleep(1.1)
        assert await client.claim_thread(ALICE, "t1", "next-job", 30) is not None
        assert not await client.save_progress(ALICE, "t1", "dead-job", cursor=_cursor(1))
        assert await client.get_cursor(ALICE, "t1") is None

    async def test_progress_writes_under_the_claim_only(self, client: Client) -> None:
        assert not await client.save_progress(ALICE, "t1", "nobody", cursor=_cursor(2))
        assert await client.get_cursor(ALICE, "t1") is None
        claim = await client.claim_thread(ALICE, "t1", "job", 30)
        assert claim is not None
        assert await client.save_progress(ALICE, "t1", "job", cursor=_cursor(2), ttl=30)
        got = await client.get_cursor(ALICE, "t1")
        assert got is not None and got.message_keys == _cursor(2).message_keys
        assert await client.claim_thread(ALICE, "t1", "other", 30) is None  # renewed, held
        assert await client.save_progress(ALICE, "t1", "job", cursor=_cursor(3))  # releases
        again = await client.claim_thread(ALICE, "t1", "other", 30)
        assert again is not None and again.cursor is not None
        assert again.cursor.message_count == 3

    async def test_failed_attempts_count_per_batch_and_reset_on_progress(
        self, client: Client
    ) -> None:
        assert await client.claim_thread(ALICE, "t1", "job", 30) is not None
        assert await client.record_failure(ALICE, "t1", "job", "batch-a", "boom") == 1
        assert await client.record_failure(ALICE, "t1", "job", "batch-a", "boom") == 2
        assert await client.record_failure(ALICE, "t1", "job", "batch-b", "boom") == 1
        await client.release_thread(ALICE, "t1", "job")
        claim = await client.claim_thread(ALICE, "t1", "job-2", 30)
        assert claim is not None and (claim.attempts, claim.failed_batch) == (1, "batch-b")
        assert await client.save_progress(ALICE, "t1", "job-2", cursor=_cursor(1))
        assert await client.record_failure(ALICE, "t1", "job-3", "batch-b", "boom") == 1

    async def test_only_progress_with_a_cursor_clears_the_failed_attempts(
        self, client: Client
    ) -> None:
        assert await client.claim_thread(ALICE, "t1", "job", 30) is not None
        assert await client.record_failure(ALICE, "t1", "job", "batch-a", "boom") == 1
        await client.set_cursor(ALICE, _cursor(1))
        assert await client.save_progress(ALICE, "t1", "job", dead_letter=_letter(), ttl=30)
        assert await client.record_failure(ALICE, "t1", "job", "batch-a", "boom") == 2
        assert await client.save_progress(ALICE, "t1", "job", cursor=_cursor(2), ttl=30)
        assert await client.record_failure(ALICE, "t1", "job", "batch-a", "boom") == 1
        await client.release_thread(ALICE, "t1", "job")
        claim = await client.claim_thread(ALICE, "t1", "job-2", 30)
        assert claim is not None and (claim.attempts, claim.failed_batch) == (1, "batch-a")
        assert claim.cursor is not None and claim.cursor.message_count == 2

    async def test_dead_letters_are_durable_listed_and_retried(self, client: Client) -> None:
        assert await client.claim_thread(ALICE, "t1", "job", 30) is not None
        letter = _letter()
        assert await client.save_progress(ALICE, "t1", "job", cursor=_cursor(1), dead_letter=letter)
        listed = await client.dead_letters()
        assert [(d.id, d.status, d.attempts, d.message_ids) for d in listed] == [
            ("dl-1", DeadLetterStatus.DEAD, 3, ["m1"])
        ]
        assert listed[0].messages == letter.messages and listed[0].error == letter.error
        assert await client.dead_letters("other-app") == []
        assert await client.dead_letters(status="retry") == []
        retried = await client.retry_dead_letter("dl-1")
        assert retried is not None and retried.status == DeadLetterStatus.RETRY
        cursor = await client.get_cursor(ALICE, "t1")
        assert cursor is not None and cursor.pending_retries == 1
        claim = await client.claim_thread(ALICE, "t1", "job-2", 30)
        assert claim is not None and [d.id for d in claim.retries] == ["dl-1"]
        assert await client.save_progress(ALICE, "t1", "job-2", resolved=["dl-1"])
        done = await client.dead_letters(status="done")
        assert [d.id for d in done] == ["dl-1"]
        cursor = await client.get_cursor(ALICE, "t1")
        assert cursor is not None and cursor.pending_retries == 0
        assert await client.retry_dead_letter("dl-1") is None  # done stays done
        assert await client.retry_dead_letter("unknown") is None

    async def test_purge_removes_claims_and_dead_letters(self, client: Client) -> None:
        assert await client.claim_thread(ALICE, "t1", "job", 30) is not None
        assert await client.save_progress(ALICE, "t1", "job", dead_letter=_letter(), ttl=30)
        await client.purge(ALICE)
        assert await client.dead_letters() == []
        assert await client.claim_thread(ALICE, "t1", "other", 30) is not None

    async def test_cursor_keys_round_trip(self, client: Client) -> None:
        cursor = _cursor(3).model_copy(update={"retired_keys": bytes(range(16))})
        await client.set_cursor(ALICE, cursor)
        got = await client.get_cursor(ALICE, "t1")
        assert got is not None
        assert (got.message_keys, got.retired_keys) == (cursor.message_keys, cursor.retired_keys)
        assert got.pending_retries == 0

    async def test_claim_arguments_are_validated(self, client: Client) -> None:
        for call, field in (
            (client.claim_thread(ALICE, "", "o", 30), "thread_id"),
            (client.claim_thread(ALICE, "t", "", 30), "owner"),
            (client.claim_thread(ALICE, "t", "o", 0), "ttl"),
            (client.save_progress(ALICE, "t", "o", cursor=_cursor(1, "u")), "cursor"),
            (client.save_progress(ALICE, "t", "o", dead_letter=_letter(BOB, "t")), "dead_letter"),
            (client.dead_letters(status="lost"), "status"),
            (client.dead_letters(limit=0), "limit"),
            (client.retry_dead_letter(""), "letter_id"),
        ):
            await refused(InvalidInputError, field, call)

    async def test_save_progress_checks_its_cursor_and_dead_letters_their_app_filter(
        self, client: Client
    ) -> None:
        """`save_progress` checks its cursor as `set_cursor` does (ids without NUL, ...)."""
        assert await client.claim_thread(ALICE, "t1", "job", 30) is not None
        bad = _cursor(1).model_copy(update={"last_message_id": "m\x001"})
        for call in (
            client.set_cursor(ALICE, bad),
            client.save_progress(ALICE, "t1", "job", cursor=bad),
        ):
            await refused(InvalidInputError, "cursor.last_message_id", call)
        assert await client.get_cursor(ALICE, "t1") is None
        assert await client.claim_thread(ALICE, "t1", "other", 30) is None  # still held
        await refused(InvalidInputError, "app_name", client.dead_letters(42))  # type: ignore[arg-type]

    async def test_pending_retries_are_counted_by_the_backend_never_taken_from_the_cursor(
        self, client: Client
    ) -> None:
        await client.set_cursor(ALICE, _cursor(2).model_copy(update={"pending_retries": 5}))
        got = await client.get_cursor(ALICE, "t1")
        assert got is not None and got.pending_retries == 0
