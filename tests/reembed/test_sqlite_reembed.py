"""Online re-embedding of a SQLite file, what only SQLite shows (the shared scenarios
are in test_scenarios.py): a keyword-only service beside a stale one at the cutover."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from langmem_trpc import SearchOptions, UserKey
from langmem_trpc.backends.sqlite import SQLiteMemoryService
from langmem_trpc.errors import ConfigurationError

from .embedders import new, old

USERS = [UserKey("app", f"u{i}") for i in range(3)]
ROOT = Path(__file__).resolve().parents[2]


def _texts(user: UserKey, n: int) -> list[str]:
    return [
        f"{user.user_id} remembers fact {i}: {'tea coffee juice water'.split()[i % 4]} {i * 13}"
        for i in range(n)
    ]


def _seed(path: Path, n: int = 120) -> SQLiteMemoryService:
    svc = SQLiteMemoryService(path, old)
    for user in USERS:
        svc.add_many(user, _texts(user, n))
    gone = svc.search(USERS[0], _texts(USERS[0], n)[5], SearchOptions(hybrid=False))[0]
    svc.delete(USERS[0], gone.id)  # soft-deleted: re-embedded too (a restore brings it back)
    return svc


def _vectors_are(path: Path, model: object) -> None:
    """Every stored vector (deleted rows too) is `model`'s unit embedding of its text."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT text, embedding FROM memories").fetchall()
        assert conn.execute("SELECT count(*) FROM reembed_vectors").fetchone() == (0,)
    for text, blob in rows:
        want = np.asarray(model.embed_documents([text])[0], np.float32)  # type: ignore[attr-defined]
        assert np.allclose(np.frombuffer(blob, np.float32), want / np.linalg.norm(want), atol=1e-6)


def _exact_hit(svc: SQLiteMemoryService, user: UserKey, text: str) -> None:
    """A vector-only search for a stored text finds it at cosine ~1: with a query of one
    model over vectors of another, the best cosine is far lower."""
    hits = svc.search(user, text, SearchOptions(hybrid=False, similarity_threshold=0.0))
    assert hits and hits[0].memory.text == text and (hits[0].score or 0) > 0.99, hits[:1]


def test_a_service_still_on_the_old_model_refuses_after_the_cutover(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    svc = _seed(path, 20)
    stale = SQLiteMemoryService(path, old)
    keyword_only = SQLiteMemoryService(path)
    svc.reembed(new)
    with pytest.raises(ConfigurationError, match="re-embedded.*reopen it with the new embedder"):
        stale.search(USERS[0], "tea")
    with pytest.raises(ConfigurationError, match="re-embedded"):
        stale.add(USERS[0], "written with the old model")
    with pytest.raises(ConfigurationError, match="langmem-trpc reembed"):
        SQLiteMemoryService(path, old)
    assert keyword_only.search(USERS[0], "tea")  # no embedder: nothing to mix
    keyword_only.add(USERS[0], "a keyword-only write gets its vector from the new model")
    with SQLiteMemoryService(path, new) as fresh:
        _exact_hit(fresh, USERS[0], "a keyword-only write gets its vector from the new model")
    for service in (svc, stale, keyword_only):
        service.close()
