"""Fuzzing the inspector: lossless edit forms, its front door and its error pages.

Generated inputs: list items with commas, newlines in the middle, look-alike
and non-ASCII text (issue 31, item 6); Host headers and origins (items 3, 8);
request bodies without a token (item 8).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the [ui] extra is not installed")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from langmem_trpc import UserKey
from langmem_trpc.backends.sqlite import SQLiteMemoryService
from langmem_trpc.ui import TOKEN_HEADER, create_app
from tests.ui.test_pages import form_of

ALICE = UserKey("support", "alice")
TOKEN = "a-long-enough-fuzz-token"
Q = "app=support&user=alice"
FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Printable items without line breaks at their ends (the service strips item ends);
# commas, quotes, look-alikes and inner line breaks are the point.
_PIECE = st.characters(
    blacklist_categories=("Cs", "Cc"), blacklist_characters="\u2028\u2029\x85"
) | st.sampled_from([",", ", ", '"', "'", "<", "&", "а", "é", "e\u0301", "\u200d", "a\nb"])
_ITEM = (
    st.lists(_PIECE, min_size=1, max_size=12)
    .map("".join)
    .filter(lambda s: s.strip() == s and bool(s.strip()))
)


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[SQLiteMemoryService]:
    with SQLiteMemoryService(str(tmp_path / "m.db")) as service:
        yield service


@pytest.fixture
def client(svc: SQLiteMemoryService) -> Iterator[TestClient]:
    app = create_app(svc, token=TOKEN)
    with TestClient(app, base_url="http://127.0.0.1", headers={TOKEN_HEADER: TOKEN}) as client:
        yield client


@FUZZ
@given(
    topics=st.lists(_ITEM, max_size=4),
    participants=st.lists(_ITEM, max_size=4),
    location=st.none() | _ITEM,
)
def test_saving_the_form_as_shown_changes_only_the_text(
    svc: Any, client: TestClient, topics: list[str], participants: list[str], location: Any
) -> None:
    entry = svc.add(
        ALICE, "original text", topics=topics, participants=participants, location=location
    )
    try:
        form = form_of(client.get(f"/memory?{Q}&id={entry.id}").text, "/memory/edit")
        form.update(kind="fact", text="edited text")
        answer = client.post(f"/memory/edit?{Q}&id={entry.id}", data=form, follow_redirects=False)
        assert answer.status_code == 303, answer.text
        after = svc.get(ALICE, entry.id)
        assert after is not None and after.text == "edited text"
        assert after.memory.model_copy(update={"text": entry.text}) == entry.memory
    finally:
        svc.purge(ALICE, entry.id)


_HOST = st.from_regex(r"[a-z0-9]([a-z0-9.-]{0,30}[a-z0-9])?", fullmatch=True)


@FUZZ
@given(host=_HOST, port=st.integers(1, 65535))
def test_no_unlisted_host_is_served(svc: Any, host: str, port: int) -> None:
    app = create_app(svc, token=TOKEN, allowed_hosts=["127.0.0.1", "mem.internal"])
    allowed = host in ("127.0.0.1", "mem.internal")
    with TestClient(app, base_url=f"http://{host}:{port}", headers={TOKEN_HEADER: TOKEN}) as c:
        assert (c.get("/").status_code == 200) is allowed


@FUZZ
@given(
    body=st.binary(max_size=3000),
    path=st.sampled_from(
        ["/user/purge", "/memory/edit", "/memory/delete", "/memory/restore", "/worker/retry"]
    ),
    content_type=st.sampled_from(
        ["application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "text/plain"]
    ),
    token=st.none() | st.text(max_size=30),
)
def test_a_post_without_the_token_is_refused_and_changes_nothing(
    svc: Any, body: bytes, path: str, content_type: str, token: Any
) -> None:
    if svc.count(ALICE) == 0:
        svc.add(ALICE, "Alice likes tea")
    app = create_app(svc, token=TOKEN)
    headers = {"content-type": content_type}
    if token is not None and token != TOKEN and token.isprintable() and token.isascii():
        headers[TOKEN_HEADER] = token
    with TestClient(app, base_url="http://127.0.0.1") as client:
        answer = client.post(f"{path}?{Q}&id=x", content=body, headers=headers)
    assert answer.status_code == 403
    assert svc.count(ALICE) == 1
