"""Memory text in prompts: the one renderer the extractor prompt and preload share.

Stored memories are data written by users and models, so a model sees them as
quoted data that cannot break out of their block. `memory_line` renders one memory
on exactly one line:

    - [id] "text" (kind=episode; date=2024-07-02; with=Bob; at=Chamonix)

Every stored string goes through `defuse` first (one line, no invisible characters,
no block delimiter word or `===` rule in any look-alike spelling; the steps are in
docs/how-it-works.md), then the text is JSON-quoted, so its closing quote is always
the renderer's own. This module imports no LangChain.
"""

from __future__ import annotations

import json
import re
import unicodedata

from ..types import Entry

DELIMITER_WORDS: tuple[tuple[str, ...], ...] = (
    ("preloaded", "user", "memories"),
    ("existing", "memories"),
)
"""The words of every block delimiter a memory is rendered inside."""

MARKER_REPLACEMENT = "[memory-marker]"

_LOOKALIKES: dict[str, str] = {
    "a": "\u0430\u0410\u0251\u03b1\u0391\u1d00\u13aa\ua4ee\u237a",
    "b": "\u0412\u0392\u0299\u13f4\ua4d0\u0432\u042c\u0184\u13cf",
    "c": "\u0441\u0421\u03f2\u03f9\u1d04\u13df\ua4da",
    "d": "\u0501\u1d05\u13a0\ua4d3",
    "e": "\u0435\u0415\u0395\u1d07\u13ac\ua4f0\u04bd\u212e",
    "f": "\u03dc\ua4dd",
    "g": "\u0261\u050d\u050c\u0262\u13c0\ua4d6",
    "h": "\u04bb\u04ba\u041d\u0397\u029c\u043d\u13bb\ua4e7",
    "j": "\u0458\u0408\u03f3\u1d0a\u13ab\ua4d9",
    "k": "\u041a\u039a\u043a\u03ba\u1d0b\u13e6\ua4d7",
    "l": "Ii1|\u0456\u0406\u0399\u03b9\u026a\u04c0\u04cf\u0131\u01c0\u05c0\u13de\ua4e1\ua4f2",
    "m": "\u041c\u039c\u043c\u1d0d\u13b7\ua4df\u03fb",
    "n": "\u0578\u0274\u039d\ua4e0",
    "o": "0\u043e\u041e\u03bf\u039f\u1d0f\u03c3\u07c0\u0585\u3007\u0555",
    "p": "\u0440\u0420\u03c1\u03a1\u1d18\u13e2\ua4d1",
    "q": "\u051b\u051a",
    "r": "\u0433\u0280\u13a1\ua4e3\u1d26",
    "s": "\u0455\u0405\ua731\u13da\ua4e2",
    "t": "\u0442\u0422\u03a4\u03c4\u1d1b\u13a2\ua4d4",
    "u": "\u03c5\u057d\u1d1c\ua4f4\u054d\u028b",
    "v": "\u03bd\u0475\u0474\u1d20\u13d9\ua4e6",
    "w": "\u051d\u051c\u1d21\u13b3\ua4ea\u0461",
    "x": "\u0445\u0425\u03a7\u03c7\ua4eb",
    "y": "\u0443\u0423\u03a5\u03b3\u028f\u04ae\u04af\u13a9\ua4ec",
    "z": "\u1d22\u0396\u13c3\ua4dc",
    "=": "\u2550\u1400\u2e40\u30a0\ua4ff",
}
_SKELETON: dict[str, str] = {c: proto for proto, chars in _LOOKALIKES.items() for c in chars}
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


def _meta(text: str) -> str:
    return defuse(text).replace(";", ",").replace("(", "[").replace(")", "]")


def memory_line(entry: Entry, *, topics: bool = False) -> str:
    """One memory as one prompt line: `- [id] "text" (kind=..; date=..; with=..; at=..)`.

    `topics=True` appends `topics=a, b` (the extractor reuses topic names;
    preload leaves them out). Every stored string is defused; the text is
    JSON-quoted.
    """
    memory = entry.memory
    meta = [f"kind={memory.kind.value}"]
    if memory.event_time is not None:
        meta.append(f"date={memory.event_time:%Y-%m-%d}")
    if memory.participants:
        meta.append("with=" + ", ".join(_meta(p) for p in memory.participants))
    if memory.location:
        meta.append(f"at={_meta(memory.location)}")
    if topics and memory.topics:
        meta.append("topics=" + ", ".join(_meta(t) for t in memory.topics))
    return f"- [{_meta(entry.id)}] {quote(memory.text)} ({'; '.join(meta)})"
