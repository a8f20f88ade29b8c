"""Regenerate the inspector screenshots in docs/img/ui-*.png (used by docs/ui.md).

Seeds a temporary SQLite database with a small support-agent history, serves
the inspector on a free 127.0.0.1 port and photographs the main views in
headless Chromium (Debian's chromium + chromium-driver, driven by Selenium).

Usage: python scripts/gen_ui_screenshots.py
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from langmem_trpc import UserKey
from langmem_trpc.backends.sqlite import SQLiteMemoryService
from langmem_trpc.testing import HashingEmbeddings
from langmem_trpc.types import Source
from langmem_trpc.ui import create_app
from langmem_trpc.ui.serving import background_server

OUT = Path(__file__).resolve().parent.parent / "docs" / "img"
ALICE = UserKey("support", "alice")
TOKEN = "screenshot-token-0123456789"


def seed(svc: SQLiteMemoryService) -> str:
    worker = Source(thread_id="thread-42", message_ids=["msg-7", "msg-8"], actor="worker")
    svc.add(
        ALICE,
        "Alice went hiking in the Alps with Tom",
        kind="episode",
        event_time="2024-05-01",
        participants=["Alice", "Tom"],
        location="Chamonix",
        topics=["travel", "hiking"],
        source=worker,
    )
    svc.add(ALICE, "Alice is allergic to peanuts", topics=["health"], source=worker)
    svc.add(ALICE, "Alice works as a nurse in Lyon", topics=["work"], source=worker)
    svc.add(
        ALICE,
        "Alice ran the Lyon half marathon",
        kind="episode",
        event_time="2024-04-14",
        participants=["Alice"],
        location="Lyon",
        topics=["sport"],
        source=worker,
    )
    tea = svc.add(ALICE, "Alice prefers green tea over coffee", topics=["drinks"], source=worker)
    svc.update(
        ALICE,
        tea.id,
        "Alice prefers oolong tea over coffee",
        source=Source(thread_id="thread-51", message_ids=["msg-3"], actor="tool"),
    )
    svc.add(UserKey("support", "bob"), "Bob plays chess on Sundays", topics=["hobbies"])
    svc.add(UserKey("sales", "carol"), "Carol manages the Nordics account", topics=["work"])
    return tea.id


def main() -> None:
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not driver_path:
        raise SystemExit(
            "needs chromium and chromium-driver (apt-get install chromium chromium-driver)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    options.add_argument("--window-size=1360,760")
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        svc = SQLiteMemoryService(str(Path(tmp) / "m.db"), embeddings=HashingEmbeddings())
        try:
            tea = seed(svc)
            driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
            try:
                app = create_app(svc, token=TOKEN, location="SQLite file memories.db")
                with background_server(app) as url:
                    driver.get(url + "/login")  # the session cookie, as an operator logs in
                    field = driver.find_element(By.NAME, "token")
                    field.send_keys(TOKEN)
                    field.submit()
                    who = "app=support&user=alice"
                    views = {
                        "ui-users.png": "/",
                        "ui-memories.png": f"/user?{who}",
                        "ui-history.png": f"/memory?{who}&id={tea}",
                        "ui-playground.png": f"/search?{who}&q=Alice+hiking+trip&k=5",
                    }
                    for name, path in views.items():
                        driver.get(url + path)
                        driver.save_screenshot(str(OUT / name))
                        print("wrote", OUT / name)
            finally:
                driver.quit()
        finally:
            svc.close()


if __name__ == "__main__":
    main()
