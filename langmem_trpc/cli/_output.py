"""Everything the CLI prints: escaping, tables, machine formats, progress.

Human output escapes control, separator and invisible format characters in
stored text (`\\n`, `\\x1b`, `\\u202e`), so a memory cannot move the cursor,
recolour the terminal, reorder what is shown or forge a row; `json`,
`jsonl` and `csv` are exact, for programs (their quoting keeps a row one record).
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import sys
import time
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timezone
from typing import Any, Literal, TypeVar

import click

from ..types import Entry, HistoryEvent

T = TypeVar("T")
OutputFormat = Literal["table", "json", "jsonl", "csv"]
FORMATS: tuple[OutputFormat, ...] = ("table", "json", "jsonl", "csv")

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Categories escaped: controls, line/paragraph separators, surrogates, private use,
# unassigned; and invisible characters that reorder or hide text (bidi controls,
# zero-width spaces and marks, word joiner, BOM). ZWJ (U+200D) stays: emoji need it.
_UNSAFE = ("Cc", "Zl", "Zp", "Cs", "Co", "Cn")
_INVISIBLE = frozenset(
    [0x061C, 0x200B, 0x200C, 0x200E, 0x200F, 0xFEFF, *range(0x202A, 0x202F), *range(0x2060, 0x2070)]
)


def _escaped(char: str) -> str:
    code = ord(char)
    if unicodedata.category(char) not in _UNSAFE and code not in _INVISIBLE:
        return char
    if char in _NAMED:
        return _NAMED[char]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe(text: str) -> str:
    """`text` with every control, separator and invisible format character escaped."""
    return text if text.isprintable() else "".join(map(_escaped, text))


def short_id(memory_id: str) -> str:
    """Generated (32 hex) ids shortened to 12 characters for tables; others as they are."""
    if len(memory_id) == 32 and all(c in "0123456789abcdef" for c in memory_id):
        return memory_id[:12]
    return memory_id


def display_width(text: str) -> int:
    """Terminal columns `text` takes: wide (CJK, fullwidth) characters take 2, combining marks 0."""
    return sum(
        0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in ("W", "F") else 1
        for c in text
    )


def _clip(text: str, width: int | None) -> str:
    """`text` cut to `width` columns, ending in "…" when it was cut."""
    if width is None or display_width(text) <= width:
        return text
    out, used = [], 0
    for char in text:
        size = display_width(char)
        if used + size > width - 1:
            break
        out.append(char)
        used += size
    return "".join(out) + "…"


def terminal_width() -> int | None:
    """Columns to fit: $COLUMNS, else the terminal's; None when stdout is not a terminal."""
    if columns := os.environ.get("COLUMNS", "").strip():
        try:
            return max(int(columns), 20)
        except ValueError:
            pass
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def render_rows(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A left-aligned table with a header; every cell escaped; the last column fills the width."""
    cells = [[safe(str(c)) for c in row] for row in rows]
    widths = [
        max([display_width(h), *(display_width(r[i]) for r in cells)])
        for i, h in enumerate(headers)
    ]
    width = terminal_width()
    last: int | None = None
    if width is not None:
        last = max(width - sum(w + 2 for w in widths[:-1]), 10)
        widths[-1] = min(widths[-1], last)
    lines = []
    for row in [list(headers), *cells]:
        *lead, tail = row
        line = "  ".join(
            c + " " * (w - display_width(c)) for c, w in zip(lead, widths, strict=False)
        )
        lines.append((line + "  " if lead else "") + _clip(tail, last))
    return "\n".join(line.rstrip() for line in lines)


def entry_json(entry: Entry) -> dict[str, Any]:
    return entry.model_dump(mode="json", exclude_none=True)


def _score(entry: Entry) -> str:
    return f"{entry.score:.2f}" if entry.score is not None else ""


def _csv(header: Iterable[Any], rows: Iterable[Iterable[Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue().rstrip("\n")


def _iso(value: datetime | None) -> str:
    return value.isoformat() if value is not None else ""


def _entry_row(e: Entry) -> list[str]:
    m = e.memory
    return (
        [e.id, e.app_name, e.user_id, m.kind.value, m.text, ";".join(m.topics)]
        + [_iso(m.event_time), ";".join(m.participants)]
        + [m.location or "", e.created_at.isoformat(), e.updated_at.isoformat()]
        + ["" if e.score is None else repr(e.score)]
        + [_iso(e.valid_from), _iso(e.valid_to), e.superseded_by or ""]
    )


def validity_span(entry: Entry) -> str:
    """When the version was true, in days: `2026-07-01 -> 2026-07-20`, `since 2026-07-01`,
    and the id of the version that superseded it, if any."""
    start = f"{entry.valid_from:%Y-%m-%d}" if entry.valid_from is not None else "?"
    span = f"{start} -> {entry.valid_to:%Y-%m-%d}" if entry.valid_to else f"since {start}"
    return span + (f" (by {short_id(entry.superseded_by)})" if entry.superseded_by else "")


def render_records(
    records: Sequence[dict[str, Any]], fmt: OutputFormat, headers: Sequence[str], empty: str
) -> str:
    """Plain records in `fmt`: indented JSON, JSON lines, CSV headed by the keys, or a table."""
    if fmt == "json":
        return json.dumps(list(records), ensure_ascii=False, indent=2)
    if fmt == "jsonl":
        return "\n".join(json.dumps(r, ensure_ascii=False) for r in records)
    if fmt == "csv":
        header = records[0].keys() if records else [h.lower() for h in headers]
        return _csv(header, (r.values() for r in records))
    if not records:
        return empty
    return render_rows(headers, [[str(v) for v in r.values()] for r in records])


def render_entries(
    entries: Sequence[Entry],
    fmt: OutputFormat,
    *,
    empty: str,
    scores: bool = False,
    validity: bool = False,
) -> str:
    """Entries in `fmt`; a table shows ID, KIND, UPDATED, (SCORE,) (VALID,) TEXT, or
    `empty`. JSON and CSV always carry the validity fields."""
    if fmt in ("json", "jsonl"):
        return render_records([entry_json(e) for e in entries], fmt, (), empty)
    if fmt == "csv":
        header = ["id", "app_name", "user_id", "kind", "text", "topics", "event_time"]
        header += ["participants", "location", "created_at", "updated_at", "score"]
        header += ["valid_from", "valid_to", "superseded_by"]
        return _csv(header, map(_entry_row, entries))
    if not entries:
        return empty
    headers = ["ID", "KIND", "UPDATED", *(["SCORE"] if scores else [])]
    headers += [*(["VALID"] if validity else []), "TEXT"]
    rows = [
        [short_id(e.id), e.kind.value, f"{e.updated_at:%Y-%m-%d %H:%M}"]
        + ([_score(e)] if scores else [])
        + ([validity_span(e)] if validity else [])
        + [e.text]
        for e in entries
    ]
    return render_rows(headers, rows)


def entry_line(entry: Entry) -> str:
    """One escaped line: id, text, (kind; date; with ...; at ...; topics: ...) and score."""
    m = entry.memory
    meta = [
        m.kind.value,
        m.event_time.strftime("%Y-%m-%d") if m.event_time else "",
        "with " + ", ".join(m.participants) if m.participants else "",
        "at " + m.location if m.location else "",
        "topics: " + ", ".join(m.topics) if m.topics else "",
    ]
    score = f" score={_score(entry)}" if entry.score is not None else ""
    return safe(f"{entry.id}  {entry.text}  ({'; '.join(p for p in meta if p)}){score}")


def _seconds(value: datetime | None) -> str:
    return value.isoformat(timespec="seconds") if value is not None else ""


def _status(entry: Entry) -> str:
    """Why a version is not current (superseded, or its validity ended), else ''."""
    if entry.superseded_by is not None:
        return "superseded (`memories versions` lists the chain)"
    if entry.valid_to is not None and entry.valid_to <= datetime.now(timezone.utc):
        return "no longer valid (valid to has passed)"
    return ""


def entry_detail(entry: Entry) -> str:
    """`memories get`: one escaped `field: value` line per field that is set."""
    memory = entry.memory
    fields = [
        ("id", entry.id),
        ("user", f"{entry.app_name}/{entry.user_id}"),
        ("kind", memory.kind.value),
        ("text", memory.text),
        ("topics", ", ".join(memory.topics)),
        ("event time", memory.event_time.isoformat() if memory.event_time else ""),
        ("participants", ", ".join(memory.participants)),
        ("location", memory.location or ""),
        ("metadata", json.dumps(memory.metadata, ensure_ascii=False) if memory.metadata else ""),
        ("created", entry.created_at.isoformat(timespec="seconds")),
        ("updated", entry.updated_at.isoformat(timespec="seconds")),
        ("valid from", _seconds(entry.valid_from)),
        ("valid to", _seconds(entry.valid_to)),
        ("superseded by", entry.superseded_by or ""),
        ("status", _status(entry)),
    ]
    return "\n".join(f"{name + ':':<15}{safe(value)}" for name, value in fields if value)


UNCHANGED_TEXT = "(text unchanged; history records only the text)"
"""How an update that kept the text shows: an event stores the texts only, not the old
topics, kind, event time, participants or location (`memories get` shows the current
ones), and an update that changed nothing is recorded too, so no field is named."""


def _change(event: HistoryEvent) -> str:
    if event.operation.value in ("add", "restore"):
        return f"+ {event.text_after!r}"
    if event.operation.value == "supersede":  # closed: the text it was replaced by
        return f"{event.text_before!r} => {event.text_after!r}"
    if event.operation.value != "update":
        return f"- {event.text_before!r}"
    if event.text_before == event.text_after:
        return f"{event.text_after!r} {UNCHANGED_TEXT}"
    return f"{event.text_before!r} -> {event.text_after!r}"


def event_line(event: HistoryEvent) -> str:
    """One change, the same in `memories history` and the demo: `+ 'new'`, `'old' -> 'new'`,
    `'same' (text unchanged; ...)`, `- 'old'`."""
    change = _change(event)
    where = ""
    if event.source and (event.source.thread_id or event.source.actor or event.source.decision):
        thread = f" thread {event.source.thread_id}" if event.source.thread_id else ""
        decision = f" decision {event.source.decision}" if event.source.decision else ""
        where = f"  [{event.source.actor or ''}{thread}{decision}]"
    at = event.at.isoformat(timespec="seconds")
    return safe(f"{at}  {event.operation.value:<6} {change}{where}")


def progress(items: Iterable[T], label: str, total: int, every_s: float = 5.0) -> Iterator[T]:
    """`items`, with progress on stderr: a bar on a terminal, else a line every `every_s` seconds."""
    if total <= 0:
        yield from items
        return
    if sys.stderr.isatty():
        with click.progressbar(items, length=total, label=label, file=sys.stderr) as bar:
            yield from bar
        return
    last = time.monotonic()
    for done, item in enumerate(items, start=1):
        yield item
        now = time.monotonic()
        if now - last >= every_s and done < total:
            click.echo(f"{label}: {done}/{total}", err=True)
            last = now


def emit(text: str) -> None:
    """Print `text` unless it is empty (an empty jsonl/csv result prints nothing)."""
    if text:
        click.echo(text)
