"""Out-of-range dates at the outer entry points, and a date fuzzer (#31.7).

An offset that pushes an instant past year 9999 or before year 1 once in UTC raised a
raw `OverflowError` from `MemoryStore.put`, the inspector's edit form (HTTP 500), and
CLI `memories add` / `import`. Dates are parsed in one place (`_time.py`); each entry
point now answers with a field error and writes nothing.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import HumanMessage

from langmem_trpc import (
    AutoMemoryWorker,
    InMemoryMemoryService,
    MemoryStore,
    UserKey,
    VerbatimExtractor,
)
from langmem_trpc._time import end_of_period, parse_flexible_time, parse_time_or_raise
from langmem_trpc.backends.sqlite import SQLiteMemoryService
from langmem_trpc.cli import cli
from langmem_trpc.errors import InvalidInputError, InvalidTimeError
from langmem_trpc.extraction import JobStatus
from langmem_trpc.service.protocol import MemoryService
from langmem_trpc.testing import HashingEmbeddings
from langmem_trpc.types import SearchOptions

ALICE = UserKey("app", "alice")
LATE = "9999-12-31T23:00:00-05:00"
EARLY = "0001-01-01T00:30:00+01:00"


@pytest.mark.parametrize("when", [LATE, EARLY])
def test_memory_store_put_keeps_an_out_of_range_event_time_out_of_the_index(when: str) -> None:
    """The store indexes the fields the service accepts and keeps the value whole."""
    store = MemoryStore(InMemoryMemoryService(embeddings=HashingEmbeddings()))
    store.put(("app", "alice"), "party", {"text": "Party", "event_time": when})
    item = store.get(("app", "alice"), "party")
    assert item is not None and item.value["event_time"] == when
    (entry,) = store.service.read(ALICE)
    assert entry.memory.event_time is None


@pytest.mark.parametrize("ttl", [1e12, 6e9])
def test_memory_store_put_refuses_a_ttl_that_ends_past_9999(ttl: float) -> None:
    store = MemoryStore(InMemoryMemoryService(embeddings=HashingEmbeddings()))
    with pytest.raises(InvalidTimeError) as info:
        store.put(("app", "alice"), "k", {"text": "Party"}, ttl=ttl)
    assert info.value.field == "ttl" and store.get(("app", "alice"), "k") is None


def test_a_message_timestamp_past_9999_is_ignored_not_fatal_to_the_job() -> None:
    svc = InMemoryMemoryService()
    message = HumanMessage("I live in Oslo", id="h1", additional_kwargs={"timestamp": LATE})
    report = AutoMemoryWorker(svc, VerbatimExtractor()).process(ALICE, "t", [message])
    assert report.status == JobStatus.COMPLETED, report.error
    assert [e.text for e in svc.read(ALICE)] == ["I live in Oslo"]


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("LANGMEM_TRPC_HOME", str(tmp_path / "home"))
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(cli, list(args), catch_exceptions=False)

    return invoke


def test_cli_add_and_import_refuse_out_of_range_dates(run, tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    base = ["--db", db, "--app", "app", "--user", "alice"]
    added = run("memories", "add", *base, "--event-time", LATE, "Party")
    assert added.exit_code != 0 and "event_time" in added.output
    assert "years 1-9999" in added.output and "Traceback" not in added.output
    assert run("memories", "add", *base, "--json", "Lives in Oslo").exit_code == 0
    export = tmp_path / "out.jsonl"
    assert run("export", "--db", db, "--app", "app", "--output", str(export)).exit_code == 0
    (record,) = [json.loads(line) for line in export.read_text().splitlines()]
    for field in ("event_time", "created_at", "expires_at", "at"):
        bad = json.loads(json.dumps(record))
        if field == "event_time":
            bad["entry"]["memory"][field] = LATE
        elif field == "at":
            bad["history"][0][field] = LATE
        else:
            bad["entry"][field] = LATE
        source = tmp_path / f"bad-{field}.jsonl"
        source.write_text(json.dumps(record) + "\n" + json.dumps(bad) + "\n")
        target = str(tmp_path / f"other-{field}.db")
        imported = run("import", "--db", target, str(source))
        assert imported.exit_code != 0, imported.output
        assert f"line 2: {field}: " in imported.output and "years 1-9999" in imported.output
        assert "Traceback" not in imported.output
        assert (
            not Path(target).exists()
            or "[]"
            in run(
                "memories", "list", "--db", target, "--app", "app", "--user", "alice", "--json"
            ).output
        )


def test_the_inspector_edit_form_answers_400_not_500(tmp_path: Path) -> None:
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from langmem_trpc.ui import create_app

    svc = SQLiteMemoryService(str(tmp_path / "m.db"), embeddings=HashingEmbeddings())
    tea = svc.add(ALICE, "Likes tea")
    form = {"text": "Likes tea", "kind": "episode", "event_time": LATE}
    app = create_app(svc, token="t")
    with TestClient(app, base_url="http://127.0.0.1:8765", raise_server_exceptions=False) as client:
        answer = client.post(
            f"/memory/edit?app=app&user=alice&id={tea.id}",
            data=form,
            headers={"X-LangMem-Token": "t"},
            follow_redirects=False,
        )
    assert answer.status_code == 400 and "event_time" in answer.text
    assert svc.get(ALICE, tea.id).memory.event_time is None  # type: ignore[union-attr]
    svc.close()


# -- fuzzed --------------------------------------------------------------------------

_YEARS = st.sampled_from([1, 2, 1969, 1970, 2024, 9998, 9999])
_OFFSETS = st.integers(-23 * 60 - 59, 23 * 60 + 59).map(lambda m: timedelta(minutes=m))


@st.composite
def iso_dates(draw: st.DrawFn) -> str:
    """ISO strings near the calendar's ends, with any offset (or none, or Z)."""
    year, month = draw(_YEARS), draw(st.integers(1, 12))
    day = draw(st.integers(1, 28)) if month != 12 else draw(st.sampled_from([1, 30, 31]))
    hour, minute = draw(st.integers(0, 23)), draw(st.integers(0, 59))
    zone = draw(st.sampled_from(["", "Z", "+", "-"]))
    text = f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:00"
    if zone in "+-" and zone:
        offset = draw(st.integers(0, 23 * 60 + 59))
        text += f"{zone}{offset // 60:02d}:{offset % 60:02d}"
    return text + ("Z" if zone == "Z" else "")


@st.composite
def aware_datetimes(draw: st.DrawFn) -> datetime:
    at = draw(st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59)))
    return at.replace(tzinfo=timezone(draw(_OFFSETS)))


_DATES = st.one_of(
    iso_dates(),
    aware_datetimes(),
    st.sampled_from(
        [LATE, EARLY, "9999", "9999-12", "9999-12-31", "0001", "May 9999", "10000-01-01"]
    ),
    st.text(st.sampled_from("0123456789-:T+Z "), max_size=25),
)


def _in_range_utc(value: datetime | None) -> bool:
    return value is None or (value.tzinfo is not None and value.utcoffset() == timedelta(0))


@settings(max_examples=300, deadline=None)
@given(when=_DATES)
def test_fuzzed_dates_parse_to_utc_or_raise_a_field_error(when: str | datetime) -> None:
    for field in ("event_time", "expires_at"):
        try:
            parsed = parse_time_or_raise(when, field)
        except InvalidTimeError as exc:
            assert exc.field == field
        else:
            assert _in_range_utc(parsed)
    if isinstance(when, str):
        try:
            assert _in_range_utc(parse_flexible_time(when))
            assert _in_range_utc(end_of_period(when))
        except InvalidTimeError:
            pass
    for name in ("time_after", "time_before"):
        try:
            SearchOptions(**{name: when})
        except InvalidTimeError as exc:
            assert exc.field == name


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(when=_DATES)
def test_fuzzed_dates_get_the_same_answer_on_every_backend(tmp_path: Path, when: object) -> None:
    answers = [
        _date_calls(InMemoryMemoryService(embeddings=HashingEmbeddings()), when),
        _date_calls(SQLiteMemoryService(str(tmp_path / f"{uuid.uuid4().hex}.db")), when),
    ]
    assert answers[0] == answers[1]


def _date_calls(svc: MemoryService, when: object) -> list[object]:
    """What add, set_expiry and get answer with `when` (a value, or the error's class and field)."""
    kept = svc.add(ALICE, "Lives in Oslo")
    calls: list[Callable[[], object]] = [
        lambda: svc.add(ALICE, "Party", kind="episode", event_time=when).memory.event_time,
        lambda: svc.set_expiry(ALICE, kept.id, when),
        lambda: getattr(svc.get(ALICE, kept.id), "expires_at", "hidden"),
    ]
    outcome: list[object] = []
    for call in calls:
        try:
            outcome.append(call())
        except InvalidInputError as exc:
            outcome.append((type(exc).__name__, exc.field))
    svc.close()
    return outcome
