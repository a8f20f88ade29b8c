"""What the CLI prints: escaping, tables, progress (langmem_trpc/cli/_output.py)."""

from __future__ import annotations

import pytest

from langmem_trpc.cli._output import progress, render_rows, safe

HOSTILE = [
    "\x1b[31mred\x1b[0m",  # ANSI colour (CSI)
    "\x1b]0;title\x07",  # OSC: set the terminal title
    "line one\nline two",
    "carriage\rreturn",
    "c1\x85next line\x9bcsi",  # C1 controls (NEL, CSI)
    "bidi \u202eevil\u202c and \u2066isolate\u2069",
    "separators\u2028line\u2029paragraph",
    "zero\u200bwidth\ufeffbom",
    "del\x7fchar",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_safe_escapes_every_control_separator_and_invisible_character(text):
    shown = safe(text)
    assert shown.isprintable()  # nothing left that moves, recolours or reorders
    assert "\\" in shown


def test_safe_keeps_ordinary_text_and_emoji():
    for text in ["Prefers dark mode", "Zoë lives in Zürich", "日本語", "👩\u200d💻 dev", "a\\nb"]:
        assert safe(text) == text


def test_safe_names_what_it_escaped():
    assert safe("a\nb\tc\x1bd\u202ee") == "a\\nb\\tc\\x1bd\\u202ee"


def test_a_table_row_is_one_line_and_fits_the_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    table = render_rows(["ID", "TEXT"], [["a1", "x" * 100], ["b2", "evil\nb3  forged"]])
    lines = table.splitlines()
    assert len(lines) == 3 and lines[0].split() == ["ID", "TEXT"]
    assert all(len(line) <= 40 for line in lines)
    assert lines[1].endswith("…")
    assert lines[2] == "b2  evil\\nb3  forged"


def test_progress_prints_a_line_every_few_seconds_off_a_terminal(capsys):
    assert list(progress(range(3), total=3, label="importing", every_s=0)) == [0, 1, 2]
    assert capsys.readouterr().err.splitlines() == ["importing: 1/3", "importing: 2/3"]


def test_wide_characters_count_as_two_columns(monkeypatch):
    from langmem_trpc.cli._output import display_width

    monkeypatch.setenv("COLUMNS", "30")
    table = render_rows(
        ["ID", "TEXT"], [["日本", "東京に住んでいて毎日ラーメンを食べます"], ["ab", "x"]]
    )
    lines = table.splitlines()
    assert all(display_width(line) <= 30 for line in lines)
    assert lines[1].endswith("…")
    starts = [
        display_width(line[: line.index(first)]) for line, first in zip(lines, "T東x", strict=True)
    ]
    assert starts == [6, 6, 6]  # the TEXT column lines up: 4 columns of ID + 2 of gap
