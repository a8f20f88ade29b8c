"""Writes and setup as sans-I/O plans, shared by the sync and async drivers (the
reads are `_reads.py`'s).

A plan is a generator over the statements of `_ops.py` (`Sql`, `Copy`, `Embed`)
that returns the result. The drivers in `sync.py` and `aio.py` only execute
steps, so the logic of each operation exists once. Validation happens before
the first yield, so bad input never opens a transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar, assert_never, cast

from ...errors import ConfigurationError
from ...service import steps
from ...service.documents import memory_keys
from ...service.language import ENGLISH, Language
from ...service.rules import stored_fingerprint, utcnow
from . import _bulk, _migrations, _sql
from ._ops import Embed, Plan, Sql

T = TypeVar("T")


# --- writes: the shared write plans, step by step in SQL --------------------


@dataclass(frozen=True)
class WriteOptions:
    """How the executor runs a plan: `vectors` answer its `Embed` step (precomputed,
    in order); `indexed=False` keeps the rows of a multi-row `Insert` out of the HNSW
    graph until `index_pending` (deferred indexing)."""

    embed: bool
    language: Language
    vectors: Sequence[Sequence[float]] | None = None
    indexed: bool = True


def write(plan: steps.Plan[T], options: WriteOptions) -> Plan[T]:
    """Run a shared write plan (`service/plans.py`) as SQL: each abstract step
    becomes the statements of its `SqlSteps` method, in the one transaction the
    driver opens.

    A multi-row `Insert` is staged by COPY and its INSERT held until the next step:
    when that step records the rows' "add" events, one statement writes both."""
    run = SqlSteps(options)
    reply: object = None
    while True:
        try:
            step = plan.send(reply)
        except StopIteration as done:
            if run.staged is not None:
                yield _bulk.insert_sql(run.staged, options.indexed, None)
            result: T = done.value
            return result
        if run.staged is not None:
            history = _bulk.added(run.staged, step)
            yield _bulk.insert_sql(run.staged, options.indexed, history)
            run.staged = None
            if history is not None:
                continue  # the events are written: `RecordHistory`'s result is None
        reply = yield from run.dispatch(step)


class SqlSteps:
    """PostgreSQL's step executor, sans-I/O: the methods of `steps.StepExecutor`, each
    a plan that yields the step's statements and returns its result, so the sync and
    async drivers run the same SQL."""

    def __init__(self, options: WriteOptions) -> None:
        self._options = options
        self.staged: steps.Insert | None = None
        """A multi-row `Insert` whose rows are staged by COPY, its INSERT not yet run."""

    def dispatch(self, step: steps.Step) -> Plan[object]:
        """The statements of `step`'s method; the one exhaustive match over the steps."""
        match step:
            case steps.Now():
                return (yield from self.now(step))
            case steps.Embed():
                return (yield from self.embed(step))
            case steps.LockUser():
                yield from self.lock_user(step)
                return None
            case steps.FindByFingerprint():
                return (yield from self.find_by_fingerprint(step))
            case steps.CountLive():
                return (yield from self.count_live(step))
            case steps.Insert():
                yield from self.insert(step)
                return None
            case steps.RecordHistory():
                yield from self.record_history(step)
                return None
            case steps.FindById():
                return (yield from self.find_by_id(step))
            case steps.FindLiveByFingerprint():
                return (yield from self.find_live_by_fingerprint(step))
            case steps.KnownFingerprints():
                return (yield from self.known_fingerprints(step))
            case steps.Rewrite():
                yield from self.rewrite(step)
                return None
            case steps.SetTopics():
                yield from self.set_topics(step)
                return None
            case steps.SetValidity():
                yield from self.set_validity(step)
                return None
            case steps.FindPredecessor():
                return (yield from self.find_predecessor(step))
            case steps.SoftDelete():
                return (yield from self.soft_delete(step))
            case steps.EvictOldest():
                return (yield from self.evict_oldest(step))
            case steps.Purge():
                return (yield from self.purge(step))
            case _:
                assert_never(step)

    def now(self, step: steps.Now) -> Plan[datetime]:
        yield from ()  # no statement: the client's clock, as `utcnow` on every backend
        return utcnow()

    def embed(self, step: steps.Embed) -> Plan[Sequence[Sequence[float] | None]]:
        if self._options.vectors is not None:  # precomputed (add_many)
            return list(self._options.vectors)
        if not self._options.embed:
            return [None] * len(step.texts)
        vectors = yield Embed(list(step.texts))
        return [list(v) for v in vectors]

    def lock_user(self, step: steps.LockUser) -> Plan[None]:
        yield Sql(_sql.USER_LOCK, _sql.user_params(step.user))

    def find_by_id(self, step: steps.FindById) -> Plan[steps.Stored | None]:
        rows = yield Sql(_sql.SELECT_BY_ID, _sql.user_params(step.user, id=step.memory_id))
        return _stored(rows, None)

    def find_live_by_fingerprint(
        self, step: steps.FindLiveByFingerprint
    ) -> Plan[steps.Stored | None]:
        query = _sql.SELECT_LIVE_BY_FINGERPRINT
        params = _sql.user_params(step.user, fp=step.fingerprint)
        if step.exclude_id is not None:
            query, params = query + " AND id <> %(id)s", {**params, "id": step.exclude_id}
        return _stored((yield Sql(query, params)), False)

    def find_by_fingerprint(self, step: steps.FindByFingerprint) -> Plan[steps.Stored | None]:
        params = _sql.user_params(step.user, fp=step.fingerprint)
        live = _stored((yield Sql(_sql.SELECT_LIVE_BY_FINGERPRINT, params)), False)
        if live is not None:
            return live
        return _stored((yield Sql(_sql.SELECT_DELETED_BY_FINGERPRINT, params)), True)

    def known_fingerprints(self, step: steps.KnownFingerprints) -> Plan[set[str]]:
        params = _sql.user_params(step.user, fps=sorted(step.fingerprints))
        rows = yield Sql(_sql.KNOWN_FINGERPRINTS, params)
        return {r["fingerprint"] for r in rows}

    def count_live(self, step: steps.CountLive) -> Plan[int]:
        rows = yield Sql(_sql.LIVE_COUNT, _sql.user_params(step.user))
        return int(rows[0]["live_count"]) if rows else 0

    def insert(self, step: steps.Insert) -> Plan[None]:
        language = self._options.language
        if len(step.rows) > 1:  # COPY now, the INSERT with the next step (`write`)
            yield from _bulk.stage(step.rows, language)
            self.staged = step
            return
        params = _sql.user_params(step.user)
        for row in step.rows:
            entry = row.entry
            content = _sql.memory_params(
                entry.memory, row.fingerprint, _vector(row.vector), language
            )
            yield Sql(
                _sql.INSERT_MEMORY,
                {
                    **params,
                    "id": entry.id,
                    "keyed": row.keyed,
                    "created": entry.created_at,
                    "updated": entry.updated_at,
                    "expires": entry.expires_at,
                    **_sql.validity_params(entry),
                    **content,
                },
            )

    def rewrite(self, step: steps.Rewrite) -> Plan[None]:
        language = self._options.language
        content = _sql.memory_params(step.memory, step.fingerprint, _vector(step.vector), language)
        sql = _sql.REWRITE_MEMORY
        if isinstance(step.vector, steps.Keep):
            sql = sql.replace(", embedding = %(embedding)b::vector", "")
        params = _sql.user_params(step.user, id=step.target.entry.id, now=step.at)
        if not isinstance(step.expires_at, steps.Keep):
            sql = sql.replace("indexed = true", "indexed = true, expires_at = %(expires)s")
            params["expires"] = step.expires_at
        yield Sql(sql, {**params, **content})

    def set_topics(self, step: steps.SetTopics) -> Plan[None]:
        memory = step.target.entry.memory.model_copy(update={"topics": list(step.topics)})
        topics = _sql.topic_params(memory, self._options.language)
        params = _sql.user_params(step.user, id=step.target.entry.id, now=step.at)
        yield Sql(_sql.SET_TOPICS, {**params, **topics})

    def set_validity(self, step: steps.SetValidity) -> Plan[None]:
        params = _sql.user_params(step.user, id=step.target.entry.id, now=step.at)
        yield Sql(
            _sql.SET_VALIDITY,
            {**params, "valid_to": step.valid_to, "superseded_by": step.superseded_by},
        )

    def find_predecessor(self, step: steps.FindPredecessor) -> Plan[steps.Stored | None]:
        exclude = sorted(step.exclude)
        params = _sql.user_params(step.user, id=step.memory_id, exclude=exclude)
        rows = yield Sql(_sql.SELECT_PREDECESSOR, params)
        return _stored(rows, False)

    def soft_delete(self, step: steps.SoftDelete) -> Plan[list[steps.Gone]]:
        params = _sql.user_params(step.user, now=step.at)
        if step.memory_ids is None:
            rows = yield Sql(_sql.SOFT_DELETE_ALL, params)
            return [(r["id"], r["text"]) for r in rows]
        gone: list[steps.Gone] = []
        for memory_id in step.memory_ids:
            rows = yield Sql(_sql.SOFT_DELETE, {**params, "id": memory_id})
            gone.extend((r["id"], r["text"]) for r in rows)
        return gone

    def evict_oldest(self, step: steps.EvictOldest) -> Plan[steps.Gone | None]:
        rows = yield Sql(_sql.EVICT_OLDEST, _sql.user_params(step.user, now=step.at))
        return (rows[0]["id"], rows[0]["text"]) if rows else None

    def record_history(self, step: steps.RecordHistory) -> Plan[None]:
        yield Sql(_sql.INSERT_HISTORY, _sql.history_params(step))

    def purge(self, step: steps.Purge) -> Plan[int]:
        params = _sql.user_params(step.user)
        if step.memory_id is not None:
            rows = yield Sql(_sql.PURGE_ONE, {**params, "id": step.memory_id})
            return int(rows[0]["n"])
        rows = yield Sql(_sql.PURGE_USER, params)
        yield Sql(_sql.DELETE_STATS, params)
        yield Sql(_sql.DELETE_TERMS, params)
        return int(rows[0]["n"])


def _vector(vector: object) -> Sequence[float] | None:
    return (
        None if vector is None or isinstance(vector, steps.Keep) else cast(Sequence[float], vector)
    )


def _stored(rows: Sequence[_sql.Row], deleted: bool | None) -> steps.Stored | None:
    if not rows:
        return None
    row = rows[0]
    if deleted is None:
        deleted = row["deleted_at"] is not None
    return steps.Stored(_sql.entry_from_row(row), bool(row["keyed"]), deleted)


# --- setup -----------------------------------------------------------------


def setup(dims: int | None, embed: bool, language: Language = ENGLISH) -> Plan[int | None]:
    """Apply missing migrations in order, under a global advisory lock; returns the vector dims.

    With an embedder and no explicit `dims`, one probe embedding fixes the dimension.
    A new database records `language`; one recorded under another language raises
    `ConfigurationError` (`check_language`) and the transaction changes nothing.
    """
    if dims is None and embed:
        probe = yield Embed(["dimension probe"], query=True)
        dims = len(probe[0])
    yield Sql(_sql.SETUP_LOCK)
    yield Sql(_sql.CREATE_EXTENSION)
    yield Sql(_sql.CREATE_MIGRATIONS_TABLE)
    rows = yield Sql(_sql.APPLIED_MIGRATIONS)
    applied = {(r["scope"], r["version"]): r["checksum"] for r in rows}
    fresh = not any(scope == _sql.CORE_SCOPE for scope, _ in applied)
    scopes: list[tuple[str, list[str]]] = [(_sql.CORE_SCOPE, _migrations.MIGRATIONS)]
    existing_dims: int | None = None
    if applied.get((_sql.VECTOR_SCOPE, 1)):
        found = yield Sql(_sql.EMBEDDING_DIMS)
        existing_dims = int(found[0]["dims"]) if found and found[0]["dims"] > 0 else None
        if dims is not None and existing_dims is not None and dims != existing_dims:
            raise ConfigurationError(
                f"the database stores {existing_dims}-dimension embeddings but the embedder "
                f"makes {dims}; use a fresh database or the matching embedder"
            )
    vector_dims = dims if dims is not None else existing_dims
    if vector_dims is not None:
        # also on a database set up earlier: its later vector migrations still apply
        scopes.append((_sql.VECTOR_SCOPE, _migrations.vector_migrations(vector_dims)))
    for scope, migrations in scopes:
        for version, sql in enumerate(migrations, start=1):
            if (scope, version) in applied:
                continue
            yield Sql(sql)
            yield Sql(_sql.RECORD_MIGRATION, (scope, version, _migrations.checksum(sql)))
            retokenize = _sql.RETOKENIZE_MIGRATIONS | {_sql.KEYS_MIGRATION}
            if scope == _sql.CORE_SCOPE and version in retokenize:
                yield from backfill_docs(language)
            if (scope, version) == (_sql.CORE_SCOPE, _sql.FINGERPRINT_MIGRATION):
                yield from backfill_fingerprints()
    if fresh:  # a new database: its documents will be in this service's language
        yield Sql(_sql.SET_LANGUAGE, {"language": language.name})
    yield from check_language(language)
    return dims if dims is not None else existing_dims


def check_language(language: Language) -> Plan[None]:
    """Raise `ConfigurationError` naming both when the database records another language."""
    rows = yield Sql(_sql.SELECT_LANGUAGE)
    if not rows:
        raise ConfigurationError(
            "language: the database records no language (its langmem_settings row was"
            " deleted); restore it, or set up a fresh database"
        )
    stored = rows[0]["value"]
    if stored != language.name:
        raise ConfigurationError(
            f"language: the database was written with language {stored!r}, not"
            f" {language.name!r}; open it with language={stored!r}"
        )


def language_checked(plan: Plan[T], language: Language, passed: Callable[[], None]) -> Plan[T]:
    """`plan` after `check_language` (a service's first operation); `passed()` once it holds."""
    yield from check_language(language)
    passed()
    return (yield from plan)


def backfill_fingerprints() -> Plan[None]:
    """Recompute the fingerprints core migration 9 names, in keyset-ordered batches."""
    after = ("", "", "")
    while True:
        rows = yield Sql(
            _sql.FINGERPRINT_SELECT,
            {"app": after[0], "user": after[1], "id": after[2], "limit": _sql.BACKFILL_BATCH},
        )
        if not rows:
            return
        fps = [
            stored_fingerprint(
                r["text"],
                r["kind"],
                _sql.utc_or_none(r["event_time"]),
                r["participants"],
                r["location"],
                r["id"] if r["keyed"] else None,
            )
            for r in rows
        ]
        yield Sql(
            _sql.FINGERPRINT_UPDATE,
            {
                "apps": [r["app_name"] for r in rows],
                "users": [r["user_id"] for r in rows],
                "ids": [r["id"] for r in rows],
                "fps": fps,
            },
        )
        last = rows[-1]
        after = (last["app_name"], last["user_id"], last["id"])


def backfill_docs(language: Language) -> Plan[None]:
    """Re-tokenise every row whose content_doc is NULL (written before migration 6,
    or reset by the stemmed-documents migration), in batches: documents, terms
    and lengths.

    The tokenizer is Python, so SQL cannot compute them; runs once, in the
    transaction that applies the migration.
    """
    while True:
        rows = yield Sql(_sql.BACKFILL_SELECT, {"limit": _sql.BACKFILL_BATCH})
        if not rows:
            return
        docs = [
            _sql.keyword_columns(
                r["text"], memory_keys(r["topics"], r["participants"], r["location"]), language
            )
            for r in rows
        ]
        yield Sql(
            _sql.BACKFILL_UPDATE,
            {
                "apps": [r["app_name"] for r in rows],
                "users": [r["user_id"] for r in rows],
                "ids": [r["id"] for r in rows],
                "content": [d["content_doc"] for d in docs],
                "topic": [d["topic_doc"] for d in docs],
                "content_terms": [" ".join(d["content_terms"]) for d in docs],
                "topic_terms": [" ".join(d["topic_terms"]) for d in docs],
                "content_len": [d["content_len"] for d in docs],
                "topic_len": [d["topic_len"] for d in docs],
            },
        )
