"""Read a file in the LoCoMo-10 layout into typed records, repairing known quirks.

Quirks handled (see docs/bench-locomo.md): sessions enumerated from the
`session_<N>` lists (not the `_date_time` keys), cat-5 items whose gold is
absent (`adversarial_answer` is a distractor, never the gold), int answers,
observation ids given as lists, and malformed evidence ids ("D8:6; D9:17",
"D:11:26", "D30:05", space-joined lists), which are normalised or dropped and
counted.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from langmem_trpc.errors import ConfigurationError

__all__ = [
    "CATEGORY_NAMES",
    "MEM0_LABELS",
    "Conversation",
    "Dataset",
    "Observation",
    "Question",
    "SPLITS",
    "Session",
    "Split",
    "Turn",
    "load_locomo",
    "normalize_evidence",
    "parse_session_date",
    "split_conversations",
]

logger = logging.getLogger(__name__)

LOCOMO_SOURCE = (
    "LoCoMo-10 is data/locomo10.json of github.com/snap-research/locomo (CC BY-NC 4.0, "
    "2.8 MB): curl -LO https://raw.githubusercontent.com/snap-research/locomo/main/data/locomo10.json"
)
"""Where the data comes from, said wherever it is missing."""

CATEGORY_NAMES = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
"""The official numbering (settled from the scorer, the prompts and the paper's counts)."""

MEM0_LABELS = {1: "single-hop", 2: "temporal", 3: "multi-hop", 4: "open-domain", 5: "adversarial"}
"""How Mem0-style tables label the same category numbers (a mislabelling, kept for comparison)."""

_SESSION_KEY = re.compile(r"^session_(\d+)$")
_DIA_ID = re.compile(r"^D(\d+):(\d+)$")
_DATE_FORMATS = (
    "%I:%M %p on %d %B, %Y",
    "%I:%M %p on %d %b, %Y",
    "%d %B, %Y",
    "%Y-%m-%d %H:%M",
    "%Y-%m-%d",
)


@dataclass(frozen=True)
class Turn:
    """One dialogue turn, stamped with its session's date (turns have no time of their own)."""

    dia_id: str
    speaker: str
    text: str
    session: int
    date: datetime | None
    date_text: str
    caption: str | None = None

    @property
    def display_text(self) -> str:
        """The text plus the shared image's caption, as the official prompts show it."""
        return f"{self.text} [shared {self.caption}]" if self.caption else self.text


@dataclass(frozen=True)
class Session:
    number: int
    date: datetime | None
    date_text: str
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Question:
    index: int
    question: str
    answer: str | None
    """The gold answer as a string; None for adversarial items (the gold is abstention)."""
    category: int
    evidence: tuple[str, ...]
    adversarial_answer: str | None = None

    @property
    def key(self) -> str:
        return str(self.index)


@dataclass(frozen=True)
class Observation:
    """One LoCoMo `observation` fact (model-generated; an oracle extraction)."""

    text: str
    speaker: str
    session: int
    date: datetime | None
    date_text: str
    dia_ids: tuple[str, ...]


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    speakers: tuple[str, str]
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...]
    observations: tuple[Observation, ...]
    dropped_evidence: tuple[str, ...] = ()
    repaired_evidence: int = 0

    @property
    def turns(self) -> list[Turn]:
        return [t for s in self.sessions for t in s.turns]


@dataclass
class Dataset:
    path: str
    conversations: list[Conversation] = field(default_factory=list)

    @property
    def dropped_evidence(self) -> list[tuple[str, str]]:
        return [(c.sample_id, e) for c in self.conversations for e in c.dropped_evidence]

    def select(
        self, sample_ids: list[str] | None, limit: int | None = None, split: Split = "all"
    ) -> list[Conversation]:
        """The conversations of `split` (`split_conversations`), then of `sample_ids`, then
        the first `limit` of them."""
        convs = [
            c
            for c in split_conversations(self.conversations, split)
            if not sample_ids or c.sample_id in sample_ids
        ]
        return convs[:limit] if limit else convs


Split = Literal["dev", "test", "all"]
SPLITS: tuple[Split, ...] = ("dev", "test", "all")


def split_conversations(conversations: list[Conversation], split: Split) -> list[Conversation]:
    """The tuning protocol's halves, by conversation in file order: "dev" is the first
    ceil(n / 2) (LoCoMo-10: conversations 1-5), "test" the rest (6-10), "all" every one.
    Defaults are chosen on "dev" only; "test" is the held-out figure."""
    if split not in SPLITS:
        raise ConfigurationError(f"split: expected one of {', '.join(SPLITS)}, got {split!r}")
    half = (len(conversations) + 1) // 2
    halves = {"dev": conversations[:half], "test": conversations[half:], "all": conversations}
    return list(halves[split])


def parse_session_date(text: str) -> datetime | None:
    """Parse "1:56 pm on 8 May, 2023" (and a few ISO forms) as UTC; None when unparseable."""
    cleaned = " ".join(text.split())
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(cleaned, fmt).replace(tzinfo=timezone.utc)
        except ValueError:
            continue
    return None


def normalize_evidence(raw: str, known: set[str]) -> tuple[list[str], list[str]]:
    """Split, repair and validate one evidence string; returns (kept ids, dropped pieces)."""
    kept: list[str] = []
    dropped: list[str] = []
    for piece in re.split(r"[\s;,]+", raw.strip().strip("()")):
        if not piece:
            continue
        candidate = "D" + piece[2:] if piece.startswith("D:") else piece
        match = _DIA_ID.match(candidate)
        if match:
            candidate = f"D{int(match.group(1))}:{int(match.group(2))}"
        if candidate in known:
            kept.append(candidate)
        else:
            dropped.append(piece)
    return kept, dropped


def _turn(raw: dict[str, Any], session: int, date: datetime | None, date_text: str) -> Turn:
    caption = raw.get("blip_caption")
    return Turn(
        dia_id=str(raw["dia_id"]),
        speaker=str(raw["speaker"]),
        text=str(raw.get("text", "")),
        session=session,
        date=date,
        date_text=date_text,
        caption=str(caption) if caption else None,
    )


def _conversation(raw: dict[str, Any]) -> Conversation:
    conv = raw["conversation"]
    numbers = sorted(
        int(m.group(1)) for k in conv if (m := _SESSION_KEY.match(k)) and isinstance(conv[k], list)
    )
    sessions = []
    for n in numbers:
        date_text = str(conv.get(f"session_{n}_date_time", ""))
        date = parse_session_date(date_text)
        turns = tuple(_turn(t, n, date, date_text) for t in conv[f"session_{n}"])
        sessions.append(Session(number=n, date=date, date_text=date_text, turns=turns))
    known = {t.dia_id for s in sessions for t in s.turns}
    questions: list[Question] = []
    dropped: list[str] = []
    repaired = 0
    for index, item in enumerate(raw.get("qa", [])):
        evidence: list[str] = []
        for ev in item.get("evidence", []) or []:
            kept, bad = normalize_evidence(str(ev), known)
            if kept != [str(ev)]:
                repaired += 1
            evidence.extend(k for k in kept if k not in evidence)
            dropped.extend(bad)
        category = int(item["category"])
        answer = item.get("answer")
        questions.append(
            Question(
                index=index,
                question=str(item["question"]),
                answer=None if category == 5 else ("" if answer is None else str(answer)),
                category=category,
                evidence=tuple(evidence),
                adversarial_answer=item.get("adversarial_answer"),
            )
        )
    observations: list[Observation] = []
    by_number = {s.number: s for s in sessions}
    for key, per_speaker in (raw.get("observation") or {}).items():
        match = re.match(r"session_(\d+)_observation", key)
        if not match or int(match.group(1)) not in by_number:
            continue
        session = by_number[int(match.group(1))]
        for speaker, facts in per_speaker.items():
            for fact in facts:
                text, ids = fact[0], fact[1] if len(fact) > 1 else []
                id_list = ids if isinstance(ids, list) else [ids]
                resolved = [k for p in id_list for k in normalize_evidence(str(p), known)[0]]
                dia_ids = tuple(dict.fromkeys(resolved))
                where = (session.number, session.date, session.date_text)
                observations.append(Observation(str(text), str(speaker), *where, dia_ids))
    if dropped:
        sample = raw.get("sample_id")
        logger.info("%s: dropped %d unresolvable evidence ids: %s", sample, len(dropped), dropped)
    return Conversation(
        sample_id=str(raw.get("sample_id", f"conv-{id(raw)}")),
        speakers=(str(conv.get("speaker_a", "A")), str(conv.get("speaker_b", "B"))),
        sessions=tuple(sessions),
        questions=tuple(questions),
        observations=tuple(observations),
        dropped_evidence=tuple(dropped),
        repaired_evidence=repaired,
    )


def load_locomo(path: str | Path) -> Dataset:
    """Load any file in the LoCoMo-10 layout (a JSON list of samples)."""
    file = Path(path)
    if not file.is_file():
        raise ConfigurationError(f"LoCoMo data file not found: {file}. {LOCOMO_SOURCE}")
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"{file} is not valid JSON: {exc}") from exc
    if not isinstance(raw, list):
        raise ConfigurationError(
            f"{file}: expected a JSON list of conversations (LoCoMo-10 layout)"
        )
    try:
        return Dataset(path=str(file), conversations=[_conversation(item) for item in raw])
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigurationError(f"{file}: not in the LoCoMo-10 layout ({exc!r})") from exc
