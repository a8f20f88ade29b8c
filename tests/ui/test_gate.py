"""The inspector's front door: Host allow-list, login, same-origin writes, bounded bodies."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the [ui] extra is not installed")

from starlette.testclient import TestClient

from langmem_trpc import UserKey
from langmem_trpc.backends.sqlite import SQLiteMemoryService
from langmem_trpc.ui import TOKEN_HEADER, create_app

ALICE = UserKey("support", "alice")
TOKEN = "a-long-enough-test-token"
LOCAL = "http://127.0.0.1:8765"
Q = "app=support&user=alice"


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[SQLiteMemoryService]:
    with SQLiteMemoryService(str(tmp_path / "m.db")) as service:
        service.add(ALICE, "Alice likes tea")
        yield service


@pytest.fixture
def app(svc: SQLiteMemoryService) -> Any:
    return create_app(svc, token=TOKEN, max_body_bytes=4096)


def _login(client: TestClient) -> None:
    answer = client.post("/login", data={"token": TOKEN}, follow_redirects=False)
    assert answer.status_code == 303


def test_no_page_carries_the_token_and_reads_need_a_login(app: Any, svc: Any) -> None:
    memory_id = svc.read(ALICE)[0].id
    pages = ["/", f"/user?{Q}", f"/memory?{Q}&id={memory_id}", f"/search?{Q}&q=tea", "/worker"]
    with TestClient(app, base_url=LOCAL) as client:
        for url in pages:  # a rebinding page that reached the server reads nothing
            answer = client.get(url, follow_redirects=False)
            assert answer.status_code == 303 and answer.headers["location"].startswith("/login")
        _login(client)
        for url in pages:
            page = client.get(url)
            assert page.status_code == 200 and TOKEN not in page.text, url
        assert TOKEN not in str(client.cookies.get("langmem_ui_session"))


def test_the_login_cookie_is_httponly_and_samesite_strict(app: Any) -> None:
    with TestClient(app, base_url=LOCAL) as client:
        wrong = client.post("/login", data={"token": "guess"}, follow_redirects=False)
        assert wrong.status_code == 403 and "set-cookie" not in wrong.headers
        right = client.post(
            "/login", data={"token": TOKEN, "next": "//evil.example/x"}, follow_redirects=False
        )
        cookie = right.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie
        assert right.headers["location"] == "/"  # never back to another site
        assert client.get("/").status_code == 200
        client.post("/logout", follow_redirects=False)
        assert client.get("/", follow_redirects=False).status_code == 303


def test_a_cross_site_write_is_refused_even_with_the_session_cookie(app: Any, svc: Any) -> None:
    with TestClient(app, base_url=LOCAL) as client:
        _login(client)
        for headers in (
            {"Origin": "http://evil.example"},
            {"Origin": "null"},
            {"Sec-Fetch-Site": "cross-site"},
        ):
            answer = client.post(f"/user/purge?{Q}", data={"confirm": "alice"}, headers=headers)
            assert answer.status_code == 403 and "cross-site" in answer.text
        assert svc.count(ALICE) == 1
        same = client.post(
            f"/user/purge?{Q}",
            data={"confirm": "alice"},
            headers={"Origin": LOCAL, "Sec-Fetch-Site": "same-origin"},
            follow_redirects=False,
        )
        assert same.status_code == 303 and svc.count(ALICE) == 0


def _asgi_post(app: Any, headers: list[tuple[bytes, bytes]], body: bytes) -> tuple[int, int]:
    """POST `body` straight through ASGI in 64 KiB chunks: (status, chunks the app read)."""
    chunks = [body[i : i + 65536] for i in range(0, len(body), 65536)] or [b""]
    read = 0
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal read
        read += 1
        if read <= len(chunks):
            return {
                "type": "http.request",
                "body": chunks[read - 1],
                "more_body": read < len(chunks),
            }
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/user/purge",
        "raw_path": b"/user/purge",
        "query_string": Q.encode(),
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1:8765"), *headers],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8765),
    }
    asyncio.run(app(scope, receive, send))
    return status, read


def test_a_token_less_post_is_refused_before_its_body_is_read(app: Any, svc: Any) -> None:
    form = [(b"content-type", b"application/x-www-form-urlencoded")]
    body = b"confirm=alice&pad=" + b"x" * 2_000_000
    status, read = _asgi_post(app, form, body)
    assert status == 403 and read == 0  # not one byte of the 2 MB was read
    assert svc.count(ALICE) == 1


def test_a_body_over_the_limit_is_a_413(app: Any, svc: Any) -> None:
    auth = [(TOKEN_HEADER.lower().encode(), TOKEN.encode())]
    form = [(b"content-type", b"application/x-www-form-urlencoded"), *auth]
    body = b"confirm=alice&pad=" + b"x" * 200_000
    declared = [*form, (b"content-length", str(len(body)).encode())]
    assert _asgi_post(app, declared, body) == (413, 0)  # refused on its Content-Length
    status, read = _asgi_post(app, form, body)  # chunked: refused once past the limit
    assert status == 413 and read == 1
    assert svc.count(ALICE) == 1
    with TestClient(app, base_url=LOCAL) as client:
        page = client.post(
            f"/user/purge?{Q}",
            content=body,
            headers={TOKEN_HEADER: TOKEN, "content-type": "application/x-www-form-urlencoded"},
        )
        assert page.status_code == 413 and "4096 bytes" in page.text
    status, _ = _asgi_post(app, form, b"confirm=alice")
    assert status == 303 and svc.count(ALICE) == 0


def test_the_printed_login_link_logs_in_and_drops_the_token_from_the_url(app: Any) -> None:
    """`langmem-trpc ui` prints `/login?token=T`: one click, as Jupyter's link, and the
    redirect's URL no longer carries the token (history, referrers)."""
    with TestClient(app, base_url=LOCAL) as client:
        wrong = client.get("/login?token=guess", follow_redirects=False)
        assert wrong.status_code == 403 and "set-cookie" not in wrong.headers
        answer = client.get("/login?token=" + TOKEN + "&next=/worker", follow_redirects=False)
        assert answer.status_code == 303 and answer.headers["location"] == "/worker"
        assert TOKEN not in answer.headers["location"]
        assert client.get("/", follow_redirects=False).status_code == 200
