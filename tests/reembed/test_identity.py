"""Embedding identity: a store refuses an embedder that did not make its vectors."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

import langmem_trpc
from langmem_trpc import UserKey
from langmem_trpc.errors import ConfigurationError
from langmem_trpc.service.identity import (
    PROBE_MIN_COSINE,
    EmbedderIdentity,
    embedder_name,
    identify,
)
from langmem_trpc.testing import HashingEmbeddings

ALICE = UserKey("app", "alice")
BACKENDS = ["sqlite", "lancedb", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'm.db'}"
    if request.param == "lancedb":
        pytest.importorskip("lancedb")
        return f"lancedb://{tmp_path / 'lance'}"
    return str(request.getfixturevalue("pg_url"))


def _seed(url: str) -> None:
    with langmem_trpc.open(url, embeddings=HashingEmbeddings()) as svc:
        svc.add(ALICE, "Prefers green tea in the morning")


def test_the_recorded_embedder_opens_again(url: str) -> None:
    _seed(url)
    with langmem_trpc.open(url, embeddings=HashingEmbeddings()) as svc:
        assert [e.memory.text for e in svc.search(ALICE, "green tea")]


def test_another_model_of_the_same_dimension_is_refused(url: str) -> None:
    _seed(url)
    with pytest.raises(ConfigurationError) as err:
        langmem_trpc.open(url, embeddings=HashingEmbeddings(seed="other"))
    message = str(err.value)
    assert "another model" in message and message.count("HashingEmbeddings") == 2


def test_another_dimension_is_refused(url: str) -> None:
    _seed(url)
    with pytest.raises(ConfigurationError, match="768-dimension"):
        langmem_trpc.open(url, embeddings=HashingEmbeddings(size=768))


def test_async_open_refuses_too(url: str) -> None:
    _seed(url)

    async def main() -> None:
        with pytest.raises(ConfigurationError, match="another model"):
            await langmem_trpc.aopen(url, embeddings=HashingEmbeddings(seed="other"))
        svc = await langmem_trpc.aopen(url, embeddings=HashingEmbeddings())
        assert await svc.asearch(ALICE, "green tea")
        await svc.aclose()

    asyncio.run(main())


def test_opening_without_an_embedder_stays_allowed(url: str) -> None:
    _seed(url)
    with langmem_trpc.open(url) as svc:
        assert [e.memory.text for e in svc.search(ALICE, "green tea")]


class _NoisyEmbeddings(HashingEmbeddings):
    """A hosted API's call-to-call float noise (far below the probe threshold)."""

    calls = 0

    def embed_query(self, text: str) -> list[float]:
        type(self).calls += 1
        return [
            x + 1e-4 * ((i * 7 + self.calls) % 3 - 1)
            for i, x in enumerate(super().embed_query(text))
        ]


def test_numeric_noise_between_calls_is_the_same_model(url: str) -> None:
    _seed(url)
    for _ in range(2):
        with langmem_trpc.open(url, embeddings=_NoisyEmbeddings()) as svc:
            assert svc.search(ALICE, "green tea")


def test_identity_name_and_probe() -> None:
    assert embedder_name(HashingEmbeddings()).endswith("HashingEmbeddings")

    class Named(HashingEmbeddings):
        model = "text-embedding-3-small"

    assert embedder_name(Named()) == "text-embedding-3-small"
    one, other = identify(HashingEmbeddings()), identify(HashingEmbeddings(seed="x"))
    assert one.matches(identify(HashingEmbeddings())) and not one.matches(other)
    assert EmbedderIdentity.from_json(one.to_json()).matches(one)
    assert 0.9 < PROBE_MIN_COSINE < 1


def test_a_sqlite_file_from_before_identities_records_one_and_refuses_another_width(
    tmp_path: Path,
) -> None:
    """A file written before identities existed has no record: the first embedder of its
    vectors' width is recorded; one of another width is refused (it used to re-embed
    every row silently at the first search)."""
    path = tmp_path / "old.db"
    _seed(f"sqlite:///{path}")
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM langmem_settings WHERE key LIKE 'embedder%'")
    with pytest.raises(ConfigurationError, match="an unrecorded embedder"):
        langmem_trpc.open(path, embeddings=HashingEmbeddings(size=768))
    with langmem_trpc.open(path, embeddings=HashingEmbeddings(seed="legacy")) as svc:
        assert svc.search(ALICE, "green tea")
    with sqlite3.connect(path) as conn:
        (value,) = conn.execute(
            "SELECT value FROM langmem_settings WHERE key = 'embedder'"
        ).fetchone()
    assert json.loads(value)["dims"] == 384
    with pytest.raises(ConfigurationError):
        langmem_trpc.open(path, embeddings=HashingEmbeddings())


def test_info_reports_backend_schema_embedder_and_counts(url: str) -> None:
    from click.testing import CliRunner

    from langmem_trpc.cli import cli

    _seed(url)
    with langmem_trpc.open(url, embeddings=HashingEmbeddings()) as svc:
        gone = svc.add(UserKey("app", "bob"), "Bob's old address")
        svc.delete(UserKey("app", "bob"), gone.id)
    result = CliRunner().invoke(cli, ["info", "--db", url, "--json"])
    assert result.exit_code == 0, result.output
    found = json.loads(result.output)
    assert found["backend"] in url.split(":")[0] or found["backend"] == "postgres"
    assert found["embedder"]["dims"] == 384 and found["embedder"]["generation"] == 0
    assert found["embedder"]["name"].endswith("HashingEmbeddings")
    assert found["users"] == 2 and found["memories"] == {"live": 1, "deleted": 1}
    text = CliRunner().invoke(cli, ["info", "--db", url])
    assert "384 dimensions" in text.output and "1 live, 1 deleted" in text.output
