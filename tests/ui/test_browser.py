"""End to end in a real headless Chromium (Selenium + Debian's chromium/chromium-driver).

The inspector runs under uvicorn on a free 127.0.0.1 port; the browser logs in
with the token (the session cookie), loads the users page, searches, opens a
memory's history, edits the memory through the form, and the test reads the
change back from the SQLite database (the untouched fields unchanged).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the [ui] extra is not installed")
pytest.importorskip("selenium", reason="selenium is not installed (pip install selenium)")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver") or (
    "/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists() else None
)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None or CHROMEDRIVER is None,
        reason="needs Debian's chromium and chromium-driver (apt-get install chromium "
        "chromium-driver); .ci/run installs them",
    ),
]

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as EC  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402

from langmem_trpc import UserKey  # noqa: E402
from langmem_trpc.backends.sqlite import SQLiteMemoryService  # noqa: E402
from langmem_trpc.testing import HashingEmbeddings  # noqa: E402
from langmem_trpc.ui import create_app  # noqa: E402
from langmem_trpc.ui.serving import background_server  # noqa: E402

ALICE = UserKey("support", "alice")
TOKEN = "browser-test-token-0123"
WAIT = 30.0  # every browser wait is bounded: page loads, scripts and navigations


def navigated(driver: webdriver.Chrome, old_page: Any) -> None:
    """Wait (bounded) until the page that held `old_page` has been replaced."""
    WebDriverWait(driver, WAIT).until(EC.staleness_of(old_page))
    WebDriverWait(driver, WAIT).until(
        lambda d: d.execute_script("return document.readyState") == "complete"
    )


def chrome(width: int = 1280, height: int = 900) -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    options.add_argument(f"--window-size={width},{height}")
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(WAIT)
    driver.set_script_timeout(WAIT)
    return driver


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    driver = chrome()
    try:
        yield driver
    finally:
        driver.quit()


def test_search_history_and_edit_in_a_real_browser(tmp_path: Path, browser) -> None:
    db = str(tmp_path / "m.db")
    svc = SQLiteMemoryService(db, embeddings=HashingEmbeddings())
    try:
        tea = svc.add(
            ALICE,
            "Alice prefers green tea",
            topics=["drinks", "Paris, France"],
            participants=["Smith, John"],
        )
        svc.add(ALICE, "Alice went hiking in the Alps", kind="episode", event_time="2024-05-01")
        svc.add(ALICE, "<script>document.title='pwned'</script>")
        with background_server(create_app(svc, token=TOKEN)) as url:
            browser.get(url + "/")
            # no page without the token; wait for the title: on a loaded CI host the
            # first navigation once returned before the page had one ('' in a fresh clone)
            WebDriverWait(browser, WAIT).until(lambda d: "log in" in d.title)
            field = browser.find_element(By.NAME, "token")
            field.send_keys(TOKEN)
            field.submit()
            navigated(browser, field)
            assert "Users" in browser.title, browser.page_source
            assert TOKEN not in browser.page_source
            link = browser.find_element(By.LINK_TEXT, "alice")
            link.click()
            navigated(browser, link)
            assert "Alice prefers green tea" in browser.page_source
            assert browser.title != "pwned"  # the stored script did not run

            search = browser.find_element(By.NAME, "q")
            search.send_keys("hiking")
            search.submit()  # a scripted submit: it does not wait for the next page
            navigated(browser, search)
            rows = browser.find_elements(By.CSS_SELECTOR, "table tr td:nth-child(3)")
            assert [r.text for r in rows][0] == "Alice went hiking in the Alps"

            browser.get(f"{url}/user?app=support&user=alice")
            link = browser.find_element(By.LINK_TEXT, tea.id[:8])
            link.click()
            navigated(browser, link)
            assert browser.find_element(By.ID, "memory-text").text == "Alice prefers green tea"
            history = browser.find_element(By.ID, "history").text
            assert "add" in history

            text = browser.find_element(By.NAME, "text")
            text.clear()
            text.send_keys("Alice prefers oolong tea")
            save = browser.find_element(By.CSS_SELECTOR, "form[action^='/memory/edit'] button")
            save.click()
            navigated(browser, save)
            assert browser.find_element(By.ID, "memory-text").text == "Alice prefers oolong tea"
            assert browser.find_element(By.ID, "notice").text == "Saved."
            diff = browser.find_elements(By.CSS_SELECTOR, "#history tr")[-1]  # the update
            assert diff.find_element(By.TAG_NAME, "del").text == "green"
            assert diff.find_element(By.TAG_NAME, "ins").text == "oolong"
    finally:
        svc.close()
    with SQLiteMemoryService(db) as fresh:
        entry = fresh.get(ALICE, tea.id)
        assert entry is not None and entry.text == "Alice prefers oolong tea"
        assert entry.memory.model_copy(update={"text": tea.text}) == tea.memory  # untouched
        assert fresh.history(ALICE, tea.id)[-1].source.actor == "ui"


def test_restore_a_superseded_version_in_a_real_browser(tmp_path: Path, browser) -> None:
    """The chain on the memory page, and the restore button's POST passing the gate's
    same-origin check as a real browser sends it."""
    db = str(tmp_path / "m.db")
    svc = SQLiteMemoryService(db, embeddings=HashingEmbeddings())
    try:
        old = svc.add(ALICE, "Production runs Go 1.23", valid_from="2026-07-01")
        new = svc.update(
            ALICE, old.id, "Production runs Go 1.24", supersede=True, valid_from="2026-07-20"
        )
        with background_server(create_app(svc, token=TOKEN)) as url:
            browser.get(f"{url}/login?token={TOKEN}")
            WebDriverWait(browser, WAIT).until(lambda d: "Users" in d.title)
            browser.get(f"{url}/memory?app=support&user=alice&id={new.id}")
            chain = browser.find_element(By.ID, "versions").text
            assert chain.index("Go 1.23") < chain.index("Go 1.24")  # oldest first
            link = browser.find_element(By.LINK_TEXT, old.id[:8])
            link.click()
            navigated(browser, link)
            assert browser.find_element(By.ID, "superseded").text == "superseded"
            button = browser.find_element(By.ID, "restore-version")
            button.click()
            navigated(browser, button)
            assert "current again" in browser.find_element(By.ID, "notice").text
    finally:
        svc.close()
    with SQLiteMemoryService(db) as fresh:
        assert [e.id for e in fresh.read(ALICE)] == [old.id]
        assert fresh.history(ALICE, old.id)[-1].source.actor == "ui"
