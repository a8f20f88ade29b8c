"""Memory text in prompts: the one renderer the extractor prompt and preload share.

Stored memories are data written by users and models, so a model sees them as
quoted data that cannot break out of their block. `memory_line` renders one memory
on exactly one line:

    - [id] "text" (kind=episode; date=2024-07-02; with=Bob; at=Chamonix)

A fact that superseded an older version may carry its past, one version and
bounded (`PAST_CHARS`): `(kind=fact; since=2026-07-20; before="Production runs
Go 1.23")`; one whose validity ends ahead (what was said: "until Friday") says
so: `until=2026-07-25T00:00Z`.

Every stored string goes through `defuse` first (one line, no invisible characters,
no block delimiter word or `===` rule in any look-alike spelling, by the table that
scripts/gen_confusables.py generates from Unicode's TR39 data; the steps are in
docs/how-it-works.md), then the text is JSON-quoted, so its closing quote is always
the renderer's own. Other values are bare only when they are plain words, and JSON
strings otherwise (`with="Smith, John"`, `at="Paris; kind=fact"`); an id is bare only
when it matches `MEMORY_ID_PATTERN`. This module imports no LangChain.
"""

from __future__ import annotations

import json
import re
import unicodedata

from ._confusables import LOOKALIKES
from .types import MEMORY_ID_PATTERN, Entry

__all__ = [
    "DELIMITER_WORDS",
    "MARKER_REPLACEMENT",
    "PAST_CHARS",
    "defuse",
    "field",
    "memory_line",
    "one_line",
    "quote",
    "skeleton",
]

DELIMITER_WORDS: tuple[tuple[str, ...], ...] = (
    ("preloaded", "user", "memories"),
    ("existing", "memories"),
)
"""The words of every block delimiter a memory is rendered inside."""

MARKER_REPLACEMENT = "[memory-marker]"

_FOLDED = {"i": "l"}
"""TR39 folds "I", "1" and "|" to "l" but keeps "i" apart: here they are one class."""
_SKELETON: dict[str, str] = {
    char: _FOLDED.get(proto, proto) for proto, chars in LOOKALIKES.items() for char in chars
}
_SKELETON["i"] = "l"
_IGNORED = "\x00"
"""What a combining mark becomes in a skeleton: skipped between the letters of a word."""

_LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_MULTI = {"m": "(?:m|rn)", "w": "(?:w|vv)"}


def _word_pattern(word: str) -> str:
    letters = [_MULTI.get(p, re.escape(p)) for p in (skeleton(c) for c in word)]
    return f"{_IGNORED}*".join(letters)


def _skeleton_char(char: str) -> str:
    if char in _SKELETON:
        return _SKELETON[char]
    category = unicodedata.category(char)
    if category in ("Mn", "Me", "Cf"):
        return _IGNORED
    base = unicodedata.normalize("NFD", char)[0]
    if base != char and base in _SKELETON:
        return _SKELETON[base]
    lower = base.lower()
    return lower if len(lower) == 1 else base


def skeleton(text: str) -> str:
    """A same-length confusables skeleton: look-alikes become their prototype letter.

    Position i of the skeleton stands for character i of `text`, so a match in
    the skeleton names the span to replace in the text. Letters are lowercase
    ASCII prototypes ("I", "i", "1" and "l" all become "l"; "0" becomes "o");
    combining marks and format characters become NUL, which delimiter
    patterns skip.
    """
    return "".join(_skeleton_char(c) for c in text)


def _flat_char(char: str) -> str:
    """Nothing for an invisible format character, a space for a line break or control."""
    category = unicodedata.category(char)
    if category == "Cf":
        return ""
    return " " if category in ("Cc", "Zl", "Zp") or char in _LINE_BREAKS else char


def one_line(text: str) -> str:
    """NFKC, no invisible format characters, no line breaks or controls, single spaces."""
    flat = "".join(_flat_char(char) for char in unicodedata.normalize("NFKC", text))
    return " ".join(flat.split())


_DELIMITERS = re.compile(
    "|".join("(?:" + r"[\W_]*".join(map(_word_pattern, words)) + ")" for words in DELIMITER_WORDS)
)
_RULE = re.compile("={3,}")


def _replace(text: str, pattern: re.Pattern[str], replacement: str) -> str:
    shape = skeleton(text)
    pieces: list[str] = []
    position = 0
    for match in pattern.finditer(shape):  # never empty: every pattern needs a character
        pieces += [text[position : match.start()], replacement]
        position = match.end()
    pieces.append(text[position:])
    return "".join(pieces)


def defuse(text: str) -> str:
    """`text` on one line, with no delimiter word or `===` rule left in any look-alike form."""
    flat = one_line(text)
    for _ in range(3):  # a replacement can join two halves into a new rule; settle it
        defused = _replace(_replace(flat, _DELIMITERS, MARKER_REPLACEMENT), _RULE, "=")
        if defused == flat:
            break
        flat = defused
    return flat


def quote(text: str) -> str:
    """`defuse(text)` as a JSON string literal (the quotes are the renderer's own)."""
    return json.dumps(defuse(text), ensure_ascii=False)


PAST_CHARS = 160
"""A rendered past version keeps at most this many characters of its text."""

_STRUCTURE = frozenset(';,=()[]"')
"""What structures a memory line: a field's value that looks like none of these
(after folding look-alikes) needs no quotes."""
_BARE_PUNCTUATION = frozenset(" .-'&/_\u2019")


def _bare(text: str) -> bool:
    return bool(text) and all(
        (char.isalnum() or char in _BARE_PUNCTUATION) and _SKELETON.get(char) not in _STRUCTURE
        for char in text
    )


def field(text: str) -> str:
    """A defused field value: bare when it is words ("Bob", "New York"), else a JSON string,
    so a location "Paris; kind=fact" stays one value and cannot add a field."""
    defused = defuse(text)
    return defused if _bare(defused) else json.dumps(defused, ensure_ascii=False)


def _memory_id(memory_id: str) -> str:
    """An id as `MEMORY_ID_PATTERN` allows it bare; any other (restored from an old
    export) as a JSON string, so it cannot close the brackets and forge a text."""
    if MEMORY_ID_PATTERN.fullmatch(memory_id):
        return memory_id
    return json.dumps(defuse(memory_id), ensure_ascii=False)


def _past(entry: Entry, before: Entry) -> list[str]:
    text = defuse(before.memory.text)
    if len(text) > PAST_CHARS:
        text = text[: PAST_CHARS - 1].rstrip() + "\u2026"
    return [f"since={entry.valid_from:%Y-%m-%d}", "before=" + json.dumps(text, ensure_ascii=False)]


def memory_line(entry: Entry, *, topics: bool = False, before: Entry | None = None) -> str:
    """One memory as one prompt line: `- [id] "text" (kind=..; date=..; with=..; at=..)`.

    `topics=True` appends `topics=a, b` (the extractor reuses topic names;
    preload leaves them out). `before`: the version this one superseded, shown
    as `since=..; before="..."` (cut to `PAST_CHARS`). A `valid_to` still ahead
    shows as `until=..`. Every stored string is defused; the text is JSON-quoted,
    every other value too unless it is plain words (`field`).
    """
    memory = entry.memory
    meta = [f"kind={memory.kind.value}"]
    if memory.event_time is not None:
        meta.append(f"date={memory.event_time:%Y-%m-%d}")
    if memory.participants:
        meta.append("with=" + ", ".join(field(p) for p in memory.participants))
    if memory.location:
        meta.append(f"at={field(memory.location)}")
    if topics and memory.topics:
        meta.append("topics=" + ", ".join(field(t) for t in memory.topics))
    if entry.valid_to is not None:
        meta.append(f"until={entry.valid_to:%Y-%m-%dT%H:%MZ}")
    if before is not None:
        meta.extend(_past(entry, before))
    return f"- [{_memory_id(entry.id)}] {quote(memory.text)} ({'; '.join(meta)})"
