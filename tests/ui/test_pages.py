"""The inspector's pages as an operator uses them: lossless edits, notices, paging, errors."""

from __future__ import annotations

import html
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the [ui] extra is not installed")

from starlette.testclient import TestClient

from langmem_trpc import UserKey
from langmem_trpc.backends.sqlite import SQLiteMemoryService
from langmem_trpc.testing import HashingEmbeddings
from langmem_trpc.ui import TOKEN_HEADER, create_app

ALICE = UserKey("support", "alice")
TOKEN = "a-long-enough-test-token"
Q = "app=support&user=alice"


class _Form(HTMLParser):
    """The fields a browser would post from the form whose action contains `action`."""

    def __init__(self, action: str) -> None:
        super().__init__()
        self.action, self.inside, self.fields = action, False, {}
        self.textarea: str | None = None
        self.select: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.inside = self.action in a.get("action", "")
        elif self.inside and tag == "input" and a.get("name") and a.get("type") != "checkbox":
            self.fields[a["name"]] = a.get("value", "")
        elif self.inside and tag == "textarea":
            self.textarea = a["name"]
            self.fields[self.textarea] = ""
        elif self.inside and tag == "select":
            self.select = a["name"]
        elif self.inside and tag == "option" and self.select and "selected" in a:
            self.fields[self.select] = a.get("value", "")

    def handle_data(self, data: str) -> None:
        if self.textarea:
            self.fields[self.textarea] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "textarea":
            self.textarea = None
        elif tag == "select":
            self.select = None
        elif tag == "form":
            self.inside = False


def form_of(html: str, action: str) -> dict[str, str]:
    parser = _Form(action)
    parser.feed(html)
    return parser.fields  # a selected <option> without value= posts its text: set it


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[SQLiteMemoryService]:
    with SQLiteMemoryService(str(tmp_path / "m.db"), embeddings=HashingEmbeddings()) as service:
        yield service


@pytest.fixture
def client(svc: SQLiteMemoryService) -> Iterator[TestClient]:
    app = create_app(svc, token=TOKEN, location="SQLite file /srv/m.db")
    with TestClient(app, base_url="http://127.0.0.1", headers={TOKEN_HEADER: TOKEN}) as client:
        yield client


def test_an_untouched_form_save_changes_only_the_edited_text(svc, client) -> None:
    entry = svc.add(
        ALICE,
        "Met John in Paris",
        kind="episode",
        event_time="2024-05-01T10:30:00+00:00",
        participants=["Smith, John", "Alice"],
        topics=["Paris, France", "work"],
        location="Paris, 5e",
    )
    page = client.get(f"/memory?{Q}&id={entry.id}").text
    form = form_of(page, "/memory/edit")
    form["kind"] = "episode"  # the selected <option> posts its text
    form["text"] = "Met John Smith in Paris"
    answer = client.post(f"/memory/edit?{Q}&id={entry.id}", data=form, follow_redirects=False)
    assert answer.status_code == 303
    after = svc.get(ALICE, entry.id)
    assert after is not None and after.text == "Met John Smith in Paris"
    assert after.memory.model_copy(update={"text": entry.text}) == entry.memory
    notice = client.get(answer.headers["location"]).text
    assert 'id="notice"' in notice and "Saved." in notice


def test_a_list_item_with_a_comma_is_edited_one_per_line(svc, client) -> None:
    entry = svc.add(ALICE, "Met John", participants=["Alice"], topics=["work"])
    form = form_of(client.get(f"/memory?{Q}&id={entry.id}").text, "/memory/edit")
    form.update(kind="fact", participants="Alice\r\nSmith, John", topics="")
    client.post(f"/memory/edit?{Q}&id={entry.id}", data=form, follow_redirects=False)
    after = svc.get(ALICE, entry.id)
    assert after.memory.participants == ["Alice", "Smith, John"] and after.memory.topics == []


def test_a_bad_filter_keeps_the_form_and_says_why_inline(svc, client) -> None:
    svc.add(ALICE, "Alice likes tea")
    page = client.get(f"/user?{Q}&after=someday&q=tea")
    assert page.status_code == 400
    assert '<form class="filters"' in page.text and 'value="someday"' in page.text
    assert 'id="problem"' in page.text and "after" in page.text
    search = client.get(f"/search?{Q}&q=tea&k=zero")
    assert search.status_code == 400 and 'name="q" value="tea"' in search.text
    assert 'id="problem"' in search.text and "k: " in search.text


def test_nav_bar_names_the_backend_and_its_location_not_a_class(svc, client) -> None:
    page = client.get("/").text
    assert "SQLiteMemoryService" not in page
    bare = create_app(svc, token=TOKEN)
    with TestClient(bare, base_url="http://127.0.0.1", headers={TOKEN_HEADER: TOKEN}) as plain:
        assert 'id="backend">SQLite<' in plain.get("/").text
    assert 'id="backend">SQLite file /srv/m.db<' in page


def test_playground_has_a_legend_and_dates_do_not_wrap(svc, client) -> None:
    svc.add(ALICE, "Alice likes tea", event_time="2024-05-01")
    page = client.get(f"/search?{Q}&q=tea").text
    legend = page.split('id="legend"', 1)[1]
    for column in ("rrf", "without question words", "Reciprocal Rank Fusion"):
        assert column in legend
    assert '<td class="ts">2024-05-01 00:00</td>' in client.get(f"/user?{Q}").text
    assert ".ts,td.ts{white-space:nowrap}" in page


def test_the_index_pages_users_and_reads_only_the_shown_ones(svc, client) -> None:
    for n in range(120):
        svc.add(UserKey("app", f"u{n:03d}"), f"memory {n}")
    first = client.get("/").text
    assert "u000" in first and "u049" in first and "u050" not in first
    assert "page 1 of 3" in first and "/?page=2" in first
    last = client.get("/?page=3").text
    assert "u119" in last and "u099" not in last and "120 users" in last
    assert client.get("/?page=0").status_code == 400


def test_restore_brings_every_field_back_and_is_recorded_as_a_restore(svc, client) -> None:
    entry = svc.add(ALICE, "Hiked the Alps", topics=["Paris, France"], location="Alps")
    deleted = client.post(f"/memory/delete?{Q}&id={entry.id}", follow_redirects=False)
    assert "notice=deleted" in deleted.headers["location"]
    page = client.get(f"/memory?{Q}&id={entry.id}").text
    assert "restore" in page
    client.post(f"/memory/restore?{Q}&id={entry.id}", follow_redirects=False)
    back = svc.get(ALICE, entry.id)
    assert back is not None and back.memory == entry.memory
    assert [h.operation.value for h in svc.history(ALICE, entry.id)] == ["add", "delete", "restore"]
    assert 'class="op-restore"' in client.get(f"/memory?{Q}&id={entry.id}").text


def test_the_deleted_filter_lists_deleted_memories_to_restore(svc, client) -> None:
    entry = svc.add(ALICE, "Hiked the Alps", topics=["Paris, France", "trip"], location="Alps")
    kept = svc.add(ALICE, "Drinks green tea")
    svc.add(UserKey("support", "bob"), "Bob's secret plan")
    svc.delete(UserKey("support", "bob"), svc.read(UserKey("support", "bob"))[0].id)
    assert 'id="show-deleted"' in client.get(f"/user?{Q}").text
    client.post(f"/memory/delete?{Q}&id={entry.id}", follow_redirects=False)
    assert "Hiked the Alps" not in client.get(f"/user?{Q}").text
    listed = client.get(f"/user?{Q}&show=deleted")
    assert listed.status_code == 200
    assert "Hiked the Alps" in listed.text and kept.text not in listed.text
    assert "secret plan" not in listed.text  # another user's deleted memory never shows
    assert f'action="/memory/restore?{Q}&id={entry.id}"' in html.unescape(listed.text)
    assert "Hiked" not in client.get(f"/user?{Q}&show=deleted&q=tea&mode=text").text
    svc.delete(ALICE, kept.id)  # no live memory left: the deleted list still opens
    assert kept.text in client.get(f"/user?{Q}&show=deleted").text
    answer = client.post(f"/memory/restore?{Q}&id={entry.id}", follow_redirects=False)
    assert answer.status_code == 303 and "notice=restored" in answer.headers["location"]
    back = svc.get(ALICE, entry.id)
    assert back is not None and back.memory.topics == ["Paris, France", "trip"]
    assert "Hiked the Alps" in client.get(f"/user?{Q}").text
    assert "Hiked the Alps" not in client.get(f"/user?{Q}&show=deleted").text
    assert client.get("/user?app=support&user=nobody&show=deleted").status_code == 404


def test_a_backend_outage_is_a_503(tmp_path: Path) -> None:
    pytest.importorskip("psycopg_pool")
    from langmem_trpc.backends.postgres import PostgresMemoryService

    svc = PostgresMemoryService(
        "postgresql://nobody@127.0.0.1:9/none?connect_timeout=1", pool_timeout=1
    )
    try:
        app = create_app(svc, token=TOKEN)
        with TestClient(app, base_url="http://127.0.0.1", headers={TOKEN_HEADER: TOKEN}) as c:
            page = c.get("/")
            assert page.status_code == 503 and "unavailable" in page.text
    finally:
        svc.close()
