"""The inspector and validity: the version chain, restoring a version, the list's filters."""

from __future__ import annotations

import html
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the [ui] extra is not installed")

from starlette.testclient import TestClient

from langmem_trpc import UserKey
from langmem_trpc.backends.sqlite import SQLiteMemoryService
from langmem_trpc.testing import HashingEmbeddings
from langmem_trpc.types import Entry
from langmem_trpc.ui import TOKEN_HEADER, create_app

ALICE = UserKey("support", "alice")
TOKEN = "a-long-enough-test-token"
Q = "app=support&user=alice"
LOCAL = "http://127.0.0.1"


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[SQLiteMemoryService]:
    with SQLiteMemoryService(str(tmp_path / "m.db"), embeddings=HashingEmbeddings()) as service:
        yield service


@pytest.fixture
def chain(svc: SQLiteMemoryService) -> tuple[Entry, Entry]:
    """ "Go 1.23" from July 1, superseded by "Go 1.24" on July 20."""
    july = datetime(2026, 7, 1, tzinfo=timezone.utc)
    upgrade = datetime(2026, 7, 20, tzinfo=timezone.utc)
    old = svc.add(ALICE, "Production runs Go 1.23", valid_from=july)
    new = svc.update(ALICE, old.id, "Production runs Go 1.24", supersede=True, valid_from=upgrade)
    return old, new


def _client(svc: SQLiteMemoryService, **options: bool) -> TestClient:
    app = create_app(svc, token=TOKEN, **options)
    return TestClient(app, base_url=LOCAL, headers={TOKEN_HEADER: TOKEN})


@pytest.fixture
def client(svc: SQLiteMemoryService) -> Iterator[TestClient]:
    with _client(svc) as client:
        yield client


def _versions_table(page: str) -> str:
    return page.split('id="versions"')[1].split("</table>")[0]


def test_the_memory_page_shows_the_chain_with_validity_and_a_link_per_version(
    client, chain
) -> None:
    old, new = chain
    page = html.unescape(client.get(f"/memory?{Q}&id={new.id}").text)
    rows = _versions_table(page).split("<tr")[2:]
    assert [old.id in rows[0], new.id in rows[1]] == [True, True]  # oldest first
    assert "2026-07-01 00:00" in rows[0] and "2026-07-20 00:00" in rows[0]
    assert "superseded" in rows[0] and "current" in rows[1] and "this version" in rows[1]
    assert f'href="/memory?{Q}&id={old.id}"' in rows[0]
    assert 'id="restore-version"' not in page  # the current version has nothing to restore
    old_page = html.unescape(client.get(f"/memory?{Q}&id={old.id}").text)
    assert 'id="superseded"' in old_page and "superseded by <a" in old_page
    assert "this version" in _versions_table(old_page).split("<tr")[2]
    assert 'id="restore-version"' in old_page


def test_restore_this_version_reopens_it_and_closes_the_newer_one(svc, client, chain) -> None:
    old, new = chain
    answer = client.post(f"/memory/restore-version?{Q}&id={old.id}", follow_redirects=False)
    assert answer.status_code == 303 and "notice=version" in answer.headers["location"]
    assert [e.id for e in svc.read(ALICE)] == [old.id]
    closed = svc.get(ALICE, new.id)
    assert closed is not None and closed.superseded_by == old.id
    assert [h.operation.value for h in svc.history(ALICE, new.id)][-1] == "supersede"
    assert [h.operation.value for h in svc.history(ALICE, old.id)][-1] == "restore"
    page = client.get(answer.headers["location"]).text
    assert 'id="notice"' in page and 'id="restore-version"' not in page


def test_restore_version_goes_through_the_gate(svc, chain) -> None:
    old, new = chain
    url = f"/memory/restore-version?{Q}&id={old.id}"
    with TestClient(create_app(svc, token=TOKEN), base_url=LOCAL) as anon:
        assert anon.post(url, follow_redirects=False).status_code == 403  # no token
        cross = {TOKEN_HEADER: TOKEN, "Origin": "http://evil.example"}
        assert anon.post(url, headers=cross, follow_redirects=False).status_code == 403
    with _client(svc, read_only=True) as ro:
        assert 'id="restore-version"' not in ro.get(f"/memory?{Q}&id={old.id}").text
        assert ro.post(url, follow_redirects=False).status_code == 403
    assert [e.id for e in svc.read(ALICE)] == [new.id]  # nothing changed


def test_the_list_shows_current_versions_and_the_superseded_filter_every_one(client, chain) -> None:
    old, new = chain
    page = client.get(f"/user?{Q}").text
    assert new.memory.text in page and old.memory.text not in page
    assert "2026-07-20 →" in page  # the validity column
    every = client.get(f"/user?{Q}&show=superseded").text
    assert new.memory.text in every and old.memory.text in every
    assert "2026-07-01 → 2026-07-20" in every and 'class="badge old"' in every
    assert 'name="show" value="superseded" checked' in every
    searched = client.get(f"/user?{Q}&show=superseded&q=production+go&mode=hybrid").text
    assert old.memory.text in searched and new.memory.text in searched
    then = client.get(f"/user?{Q}&as_of=2026-07-10").text
    assert old.memory.text in then and new.memory.text not in then
    bad = client.get(f"/user?{Q}&as_of=2026-07-10&show=superseded")
    assert bad.status_code == 400 and "include_superseded" in bad.text


def test_the_edit_form_can_save_a_change_as_a_new_version(svc, client) -> None:
    entry = svc.add(ALICE, "Production runs Go 1.23")
    page = client.get(f"/memory?{Q}&id={entry.id}").text
    assert 'name="supersede" value="yes"' in page
    form = {"text": "Production runs Go 1.24", "orig_text": entry.memory.text, "supersede": "yes"}
    answer = client.post(f"/memory/edit?{Q}&id={entry.id}", data=form, follow_redirects=False)
    assert answer.status_code == 303
    (current,) = svc.read(ALICE)
    assert current.id != entry.id and current.memory.text == "Production runs Go 1.24"
    assert f"id={current.id}" in answer.headers["location"]
    old = svc.get(ALICE, entry.id)
    assert old is not None and old.superseded_by == current.id
    plain = {"text": "Production runs Go 1.25", "orig_text": current.memory.text}
    client.post(f"/memory/edit?{Q}&id={current.id}", data=plain, follow_redirects=False)
    assert [e.id for e in svc.read(ALICE)] == [current.id]  # unticked: in place, as before
