"""The inspector's routes through Starlette's TestClient, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the [ui] extra is not installed")

from starlette.testclient import TestClient

from langmem_trpc import UserKey
from langmem_trpc.backends.sqlite import SQLiteMemoryService
from langmem_trpc.service.protocol import MemoryService
from langmem_trpc.testing import HashingEmbeddings
from langmem_trpc.types import Source
from langmem_trpc.ui import TOKEN_HEADER, create_app
from langmem_trpc.ui.app import word_diff

ALICE = UserKey("support", "alice")
BOB = UserKey("support", "bob")
XSS = '<script>alert("pwned")</script><img src=x onerror=alert(1)>'
TOKEN = "sekrit-token"
Q = "app=support&user=alice"


@pytest.fixture(params=["sqlite", "postgres"])
def svc(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryService]:
    service: MemoryService
    if request.param == "sqlite":
        service = SQLiteMemoryService(str(tmp_path / "m.db"), embeddings=HashingEmbeddings())
    else:
        from langmem_trpc.backends.postgres import PostgresMemoryService

        service = PostgresMemoryService(
            request.getfixturevalue("pg_url"), embeddings=HashingEmbeddings()
        )
        service.setup()  # type: ignore[attr-defined]
    yield service
    service.close()


@pytest.fixture
def seeded(svc: MemoryService) -> dict[str, Any]:
    hike = svc.add(
        ALICE,
        "Alice went hiking in the Alps",
        kind="episode",
        event_time="2024-05-01",
        participants=["Alice", "Tom"],
        location="Alps",
        topics=["travel"],
        source=Source(thread_id="t-1", message_ids=["m1", "m2"], actor="worker"),
    )
    tea = svc.add(ALICE, "Alice prefers green tea", topics=["drinks"])
    svc.update(ALICE, tea.id, "Alice prefers oolong tea", source=Source(actor="tool"))
    evil = svc.add(ALICE, XSS)
    bob = svc.add(BOB, "Bob likes chess")
    return {"hike": hike, "tea": tea, "evil": evil, "bob": bob}


LOCAL = "http://127.0.0.1"


def logged_in(app: Any) -> TestClient:
    """A client of `app` that logged in with the token (the session cookie)."""
    client = TestClient(app, base_url=LOCAL)
    client.__enter__()
    answer = client.post("/login", data={"token": TOKEN, "next": "/"}, follow_redirects=False)
    assert answer.status_code == 303 and "langmem_ui_session" in client.cookies
    return client


@pytest.fixture
def app(svc: MemoryService) -> Any:
    return create_app(svc, token=TOKEN)


@pytest.fixture
def client(app: Any) -> Iterator[TestClient]:
    # One event loop for the client's life, as under uvicorn (a bare TestClient
    # starts a loop per request, and an async pool is bound to its loop).
    client = logged_in(app)
    yield client
    client.__exit__(None, None, None)


@pytest.fixture
def anon(app: Any) -> Iterator[TestClient]:
    """A client of the same app that never logged in."""
    with TestClient(app, base_url=LOCAL) as client:
        yield client


def _post(client: TestClient, path: str, data: dict[str, str], **headers: str) -> Any:
    return client.post(path, data=data, headers=headers, follow_redirects=False)


def test_index_lists_apps_users_counts_and_last_activity(client, seeded) -> None:
    page = client.get("/")
    assert page.status_code == 200
    assert "support" in page.text and "alice" in page.text and "bob" in page.text
    assert "2 users" in page.text
    assert '<td class="num">3</td>' in page.text and '<td class="num">1</td>' in page.text
    assert f"/user?{Q.replace('&', '&amp;')}" in page.text
    assert page.headers["content-security-policy"].startswith("default-src 'none'")


def test_user_page_lists_fields_and_filters(client, seeded) -> None:
    page = client.get(f"/user?{Q}")
    assert page.status_code == 200
    for text in ("Alice went hiking in the Alps", "Tom", "Alps", "travel", "2024-05-01"):
        assert text in page.text
    assert "Bob likes chess" not in page.text
    episodes = client.get(f"/user?{Q}&kind=episode").text
    assert "hiking" in episodes and "oolong" not in episodes
    later = client.get(f"/user?{Q}&after=2024-06-01").text
    assert "hiking" not in later
    text_mode = client.get(f"/user?{Q}&q=OOLONG&mode=text").text
    assert "oolong" in text_mode and "hiking" not in text_mode
    hybrid = client.get(f"/user?{Q}&q=hiking+trip&mode=hybrid").text
    assert "hiking" in hybrid and "score" in hybrid


def test_bad_input_is_a_400_naming_the_field(client, seeded) -> None:
    for url, field in [
        (f"/user?{Q}&after=someday", "after"),
        (f"/user?{Q}&kind=bogus", "kind"),
        (f"/search?{Q}&q=tea&k=zero", "k"),
        ("/user?app=support", "user"),
    ]:
        page = client.get(url)
        assert page.status_code == 400, url
        assert field in page.text


def test_a_date_past_the_supported_range_is_a_400_naming_the_field(client, seeded) -> None:
    # The offset pushes the instant past year 9999: the same answer the tools give, not a 500.
    for field in ("after", "before"):
        page = client.get(f"/user?{Q}&{field}=9999-12-31T23:59:59-01:00")
        assert page.status_code == 400
        assert f"{field}: " in page.text and "outside the supported dates" in page.text


def test_unknown_user_and_memory_are_404(client, seeded) -> None:
    assert client.get("/user?app=support&user=nobody").status_code == 404
    assert client.get("/search?app=support&user=nobody&q=x").status_code == 404
    assert client.get("/export.jsonl?app=support&user=nobody").status_code == 404
    assert client.get(f"/memory?{Q}&id=does-not-exist").status_code == 404
    # another user's memory id is as unknown as a missing one
    assert client.get(f"/memory?{Q}&id={seeded['bob'].id}").status_code == 404
    assert client.get("/no/such/page").status_code == 404
    assert client.get("/worker").status_code == 200  # the service has the dead-letter API


def test_xss_payloads_render_inert(client, seeded) -> None:
    for url in (f"/user?{Q}", f"/memory?{Q}&id={seeded['evil'].id}", f"/search?{Q}&q=alert"):
        page = client.get(url)
        assert page.status_code == 200
        assert "<script>" not in page.text and "<img src=x" not in page.text, url
        assert "&lt;script&gt;" in page.text, url
    query_xss = client.get(f"/user?{Q}&q=%3Cscript%3Ealert(1)%3C/script%3E&mode=text")
    assert "<script>alert(1)" not in query_xss.text


def test_memory_history_shows_diff_and_source(client, seeded) -> None:
    page = client.get(f"/memory?{Q}&id={seeded['tea'].id}")
    assert page.status_code == 200
    assert "<del>green</del>" in page.text and "<ins>oolong</ins>" in page.text
    hike = client.get(f"/memory?{Q}&id={seeded['hike'].id}").text
    assert "t-1" in hike and "m1, m2" in hike and "worker" in hike


def test_word_diff_runs() -> None:
    assert word_diff("a b c", "a x c") == [
        ("same", "a "),
        ("del", "b"),
        ("ins", "x"),
        ("same", " c"),
    ]
    assert word_diff(None, "new") == [("ins", "new")]
    assert word_diff("old", None) == [("del", "old")]


def test_post_without_or_with_a_wrong_token_is_403_and_changes_nothing(svc, anon, seeded) -> None:
    tea = seeded["tea"].id
    for headers in ({}, {TOKEN_HEADER: "wrong"}, {"Authorization": "Bearer wrong"}):
        edit = _post(anon, f"/memory/edit?{Q}&id={tea}", {"text": "hacked"}, **headers)
        assert edit.status_code == 403
        assert _post(anon, f"/memory/delete?{Q}&id={tea}", {}, **headers).status_code == 403
        assert _post(anon, f"/user/purge?{Q}", {"confirm": "alice"}, **headers).status_code == 403
    anon.cookies.set("langmem_ui_session", "forged")
    assert _post(anon, f"/user/purge?{Q}", {"confirm": "alice"}).status_code == 403
    anon.cookies.clear()
    assert svc.get(ALICE, tea).text == "Alice prefers oolong tea"
    assert svc.count(ALICE) == 3
    header = anon.post(
        f"/memory/edit?{Q}&id={tea}", data={"text": "via header"}, headers={TOKEN_HEADER: TOKEN}
    )
    assert header.status_code == 200 and svc.get(ALICE, tea).text == "via header"
    bearer = _post(
        anon, f"/memory/edit?{Q}&id={tea}", {"text": "bearer"}, Authorization=f"Bearer {TOKEN}"
    )
    assert bearer.status_code == 303 and svc.get(ALICE, tea).text == "bearer"


def test_edit_updates_fields_in_the_database(svc, client, seeded) -> None:
    tea = seeded["tea"].id
    form = {
        "text": "Alice prefers jasmine tea",
        "topics": "drinks\ntea",
        "kind": "fact",
        "participants": "Alice",
        "location": "Paris",
        "event_time": "",
    }
    answer = _post(client, f"/memory/edit?{Q}&id={tea}", form)
    assert answer.status_code == 303 and "/memory?" in answer.headers["location"]
    assert "Saved." in client.get(answer.headers["location"]).text  # the notice after a save
    entry = svc.get(ALICE, tea)
    assert entry is not None and entry.text == "Alice prefers jasmine tea"
    assert entry.memory.topics == ["drinks", "tea"] and entry.memory.location == "Paris"
    assert svc.history(ALICE, tea)[-1].source.actor == "ui"
    bad = _post(client, f"/memory/edit?{Q}&id={tea}", {**form, "text": "   "})
    assert bad.status_code == 400 and "text" in bad.text
    assert svc.get(ALICE, tea).text == "Alice prefers jasmine tea"
    missing = _post(client, f"/memory/edit?{Q}&id=nope", form)
    assert missing.status_code == 404


def test_delete_restore_and_purge_a_memory(svc, client, seeded) -> None:
    tea = seeded["tea"].id
    assert _post(client, f"/memory/delete?{Q}&id={tea}", {}).status_code == 303
    assert svc.get(ALICE, tea) is None
    deleted = client.get(f"/memory?{Q}&id={tea}")
    assert deleted.status_code == 200 and "deleted" in deleted.text and "restore" in deleted.text
    assert _post(client, f"/memory/delete?{Q}&id={tea}", {}).status_code == 404
    assert _post(client, f"/memory/restore?{Q}&id={tea}", {}).status_code == 303
    assert svc.get(ALICE, tea).text == "Alice prefers oolong tea"
    assert svc.get(ALICE, tea).memory.topics == ["drinks"]  # every field comes back
    assert [h.operation.value for h in svc.history(ALICE, tea)][-2:] == ["delete", "restore"]
    refused = _post(client, f"/memory/purge?{Q}&id={tea}", {})
    assert refused.status_code == 400 and "confirm" in refused.text
    assert svc.get(ALICE, tea) is not None
    assert _post(client, f"/memory/purge?{Q}&id={tea}", {"confirm": "yes"}).status_code == 303
    assert svc.get(ALICE, tea) is None and svc.history(ALICE, tea) == []
    assert client.get(f"/memory?{Q}&id={tea}").status_code == 404


def test_purge_user_needs_the_typed_user_id(svc, client, seeded) -> None:
    wrong = _post(client, f"/user/purge?{Q}", {"confirm": "alicee"})
    assert wrong.status_code == 400 and svc.count(ALICE) == 3
    assert _post(client, f"/user/purge?{Q}", {"confirm": "alice"}).status_code == 303
    assert svc.count(ALICE) == 0 and svc.count(BOB) == 1


def test_export_jsonl_round_trips_records(client, seeded) -> None:
    answer = client.get(f"/export.jsonl?{Q}")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("application/x-ndjson")
    records = [json.loads(line) for line in answer.text.splitlines()]
    assert sorted(r["entry"]["memory"]["text"] for r in records) == sorted(
        ["Alice went hiking in the Alps", "Alice prefers oolong tea", XSS]
    )
    assert all(r["history"] for r in records)


def test_search_playground_shows_each_leg_and_signal(client, seeded) -> None:
    page = client.get(f"/search?{Q}&q=hiking+Alps&k=5")
    assert page.status_code == 200
    assert "vector rank" in page.text and "keyword rank" in page.text
    assert "without session context" in page.text
    assert "Alice went hiking in the Alps" in page.text
    empty = client.get(f"/search?{Q}")
    assert empty.status_code == 200 and 'id="explain"' not in empty.text


def test_read_only_hides_and_refuses_writes(svc, seeded) -> None:
    client = logged_in(create_app(svc, token=TOKEN, read_only=True))
    try:
        _read_only_checks(svc, client, seeded)
    finally:
        client.__exit__(None, None, None)


def _read_only_checks(svc, client, seeded) -> None:
    page = client.get(f"/memory?{Q}&id={seeded['tea'].id}")
    assert page.status_code == 200
    forms = page.text.replace('<form class="filters"', "").replace('action="/logout"', "")
    assert '<form method="post" action' not in forms and "/memory/" not in forms
    assert "purge" not in client.get(f"/user?{Q}").text.lower().replace("playground", "")
    answer = _post(client, f"/memory/edit?{Q}&id={seeded['tea'].id}", {"text": "x"})
    assert answer.status_code == 403 and "read-only" in answer.text
    assert svc.get(ALICE, seeded["tea"].id).text == "Alice prefers oolong tea"


def test_allowed_hosts_refuses_other_host_headers(svc, seeded) -> None:
    app = create_app(svc, token=TOKEN, allowed_hosts=["127.0.0.1"])
    auth = {TOKEN_HEADER: TOKEN}
    with TestClient(app, base_url="http://evil.test") as client:
        assert client.get("/", headers=auth).status_code == 400
    with TestClient(app, base_url="http://127.0.0.1") as local:
        assert local.get("/", headers=auth).status_code == 200


def test_the_host_check_is_on_by_default_with_the_loopback_names(svc, seeded) -> None:
    # DNS rebinding: the attacker's name resolves to the server; its Host header is theirs.
    app = create_app(svc, token=TOKEN)
    auth = {TOKEN_HEADER: TOKEN}
    for host in ("rebind.attacker.example", "127.0.0.2.nip.io", "testserver"):
        with TestClient(app, base_url=f"http://{host}:8765") as client:
            assert client.get("/", headers=auth).status_code == 400, host
    for host in ("127.0.0.1", "localhost", "[::1]"):
        with TestClient(app, base_url=f"http://{host}:8765") as client:
            assert client.get("/", headers=auth).status_code == 200, host


def test_new_token_per_app(svc) -> None:
    first, second = create_app(svc), create_app(svc)
    assert first.state.token != second.state.token and len(first.state.token) >= 20


def test_threads_page_shows_each_thread_with_its_cursor(svc, client, seeded) -> None:
    from langmem_trpc.types import ExtractionCursor

    svc.set_cursor(ALICE, ExtractionCursor(thread_id="t-1", last_message_id="m2", message_count=4))
    page = client.get(f"/threads?{Q}")
    assert page.status_code == 200
    row = page.text.split('<td class="mono">t-1</td>', 1)[1].split("</tr>", 1)[0]
    assert '<td class="num">1</td>' in row  # one write from thread t-1
    assert '<td class="num">4</td>' in row and "m2" in row
    assert client.get("/threads?app=support&user=nobody").status_code == 404


# -- worker panel: a real dead letter from a real job ---------------------------------


class _AlwaysFails:
    """An extractor whose every call fails, as a model behind a content filter does."""

    def extract(self, request: Any) -> Any:
        raise RuntimeError("content filter rejected <b>the batch</b>")


@pytest.fixture
def dead_letter(svc: MemoryService) -> Any:
    from langchain_core.messages import HumanMessage

    from langmem_trpc import AutoMemoryWorker
    from langmem_trpc.extraction import JobStatus

    worker = AutoMemoryWorker(svc, _AlwaysFails(), max_attempts=2)
    thread = [HumanMessage("poison pill", id="m0"), HumanMessage("and more", id="m1")]
    assert worker.process(ALICE, "t-poison", thread).status == JobStatus.FAILED
    assert worker.process(ALICE, "t-poison", thread).status == JobStatus.DEAD_LETTERED
    (letter,) = svc.dead_letters()
    return letter


def _letter_row(page: str, letter_id: str) -> str:
    return page.split(f'<td class="mono">{letter_id[:8]}</td>', 1)[1].split("</tr>", 1)[0]


def test_worker_page_lists_dead_letters_and_thread_cursors(client, dead_letter) -> None:
    page = client.get("/worker")
    assert page.status_code == 200
    row = _letter_row(page.text, dead_letter.id)
    assert "support / alice" in row and '<td class="mono">t-poison</td>' in row
    assert '<td class="num">2</td>' in row  # attempts
    assert "content filter rejected &lt;b&gt;the batch&lt;/b&gt;" in row  # escaped
    assert "m0, m1" in row and 'action="/worker/retry"' in row
    cursors = page.text.split('id="cursors"', 1)[1]
    cursor_row = cursors.split('<td class="mono">t-poison</td>', 1)[1].split("</tr>", 1)[0]
    assert '<td class="num">2</td>' in cursor_row  # the cursor moved past both messages
    assert client.get("/worker?status=done").text.count("t-poison") == 0
    bad = client.get("/worker?status=bogus")
    assert bad.status_code == 400 and "status" in bad.text


def test_retry_needs_the_token_and_queues_the_letter_in_the_database(
    svc, client, dead_letter
) -> None:
    from langmem_trpc.types import DeadLetterStatus

    with TestClient(client.app, base_url=LOCAL) as anon:
        assert _post(anon, "/worker/retry", {"id": dead_letter.id}).status_code == 403
        wrong = _post(anon, "/worker/retry", {"id": dead_letter.id}, **{TOKEN_HEADER: "wrong"})
        assert wrong.status_code == 403
    assert svc.dead_letters()[0].status == DeadLetterStatus.DEAD
    answer = _post(client, "/worker/retry", {"id": dead_letter.id})
    assert answer.status_code == 303 and answer.headers["location"] == "/worker"
    (letter,) = svc.dead_letters()
    assert letter.id == dead_letter.id and letter.status == DeadLetterStatus.RETRY
    assert svc.get_cursor(ALICE, "t-poison").pending_retries == 1
    row = _letter_row(client.get("/worker").text, dead_letter.id)
    assert "retry</span>" in row and "<form" not in row  # queued: no second retry button
    unknown = _post(client, "/worker/retry", {"id": "no-such-letter"})
    assert unknown.status_code == 404 and "no-such-letter" in unknown.text
    missing = _post(client, "/worker/retry", {})
    assert missing.status_code == 400 and "id" in missing.text


def test_read_only_hides_and_refuses_retry(svc, dead_letter) -> None:
    from langmem_trpc.types import DeadLetterStatus

    client = logged_in(create_app(svc, token=TOKEN, read_only=True))
    try:
        page = client.get("/worker")
        assert page.status_code == 200 and "t-poison" in page.text
        assert 'action="/worker/retry"' not in page.text
        answer = _post(client, "/worker/retry", {"id": dead_letter.id})
        assert answer.status_code == 403 and "read-only" in answer.text
    finally:
        client.__exit__(None, None, None)
    assert svc.dead_letters()[0].status == DeadLetterStatus.DEAD


def test_app_shutdown_closes_the_async_pool_it_opened_and_the_service_stays_usable(
    request, svc, seeded
) -> None:
    # psycopg_pool's maintenance tasks survive cancellation: a pool still open when
    # the server's loop ends could hang the loop's shutdown (and the test run).
    if "postgres" not in request.node.callspec.id:
        pytest.skip("only PostgreSQL binds a pool to the server's loop")
    auth = {TOKEN_HEADER: TOKEN}
    with TestClient(create_app(svc, token=TOKEN), base_url=LOCAL, headers=auth) as client:
        assert client.get(f"/user?{Q}").status_code == 200
        pool = svc._async_pool  # type: ignore[attr-defined]
        assert pool is not None and not pool.closed
    assert pool.closed
    with TestClient(create_app(svc, token=TOKEN), base_url=LOCAL, headers=auth) as again:
        assert "Bob likes chess" in again.get("/user?app=support&user=bob").text  # a new pool
    assert svc.get(BOB, seeded["bob"].id) is not None


def test_history_shows_the_reconcile_decision_that_fired(client, svc, seeded) -> None:
    decided = Source(
        thread_id="t-2", actor="worker", decision="update tier=update score=0.72 jaccard=0.67"
    )
    svc.update(ALICE, seeded["tea"].id, "Alice prefers jasmine tea", source=decided)
    page = client.get(f"/memory?{Q}&id={seeded['tea'].id}")
    assert page.status_code == 200
    assert "decision" in page.text
    assert "update tier=update score=0.72 jaccard=0.67" in page.text
