"""`LanceDBMemoryService`: the in-memory reference backend, with the table as its truth.

The service is `InMemoryMemoryService` (its step executor, so the shared write
plans; its reads) over a cache of the table. The first call that touches a
user loads the user's memory rows and history in one scan; every write plan,
`set_expiry` and claim op writes what it changed to the table in one table
version before it returns, and one the table refuses is undone in memory too.
Search answers from the cache through a per-user index (postings, corpus
totals, the vector matrix) and the shared scorer and ranking, so rankings
equal the reference's at a fraction of its cost. The cache is this process's
copy: the backend does not declare `CROSS_PROCESS`.
"""

from __future__ import annotations

import base64
import itertools
import json
from collections import Counter, OrderedDict
from collections.abc import Callable, Container
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ...service import _claims as c
from ...service import _search as ks
from ...service import _steps as s
from ...service._core import Limits, check_app_filter, check_user, resolve_options
from ...service._language import Language
from ...service.capabilities import Capability
from ...service.memory import InMemoryMemoryService, _Row, _UserData, unit_vector
from ...types import DeadLetter, Entry, ExtractionCursor, HistoryEvent, Kind, SearchOptions, UserKey
from ..sqlite._scoring import score_candidates
from ._store import CLAIM, CURSOR, HISTORY, LETTER, MEMORY, Store, digest, record, scope_of

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

__all__ = ["LanceDBMemoryService"]

T = TypeVar("T")
STATE_ROWS = 200_000
"""Memory rows kept over all users by default (the service's `state_rows`)."""
_BYTES = ("message_keys", "retired_keys")


def _cursor_json(cursor: ExtractionCursor) -> str:
    data = cursor.model_dump(mode="json", exclude=set(_BYTES))
    return json.dumps(data | {n: base64.b64encode(getattr(cursor, n)).decode() for n in _BYTES})


def _cursor_of(body: str) -> ExtractionCursor:
    data = json.loads(body)
    return ExtractionCursor.model_validate(data | {n: base64.b64decode(data[n]) for n in _BYTES})


def _top(
    entries: list[Entry], scores: np.ndarray, keep: Callable[[Entry], bool], pool: int
) -> list[tuple[Entry, float]]:
    """The `pool` entries `keep` accepts with the highest scores (clipped at 0), best
    first; equal scores keep their row order, as the reference's stable sort does."""
    hits: list[tuple[Entry, float]] = []
    for i in np.argsort(-scores, kind="stable").tolist():
        if len(hits) == pool:
            break
        if keep(entries[i]):
            hits.append((entries[i], max(0.0, float(scores[i]))))
    return hits


class _Index:
    """A user's live rows as search reads them: keyword documents with postings and
    corpus totals, and the vector matrix. A write only marks its rows `stale`; the
    next search brings them up to date (adds do not pay for tokenising)."""

    def __init__(self) -> None:
        self.stale: set[str] = set()
        self.docs: dict[str, ks.KeywordDoc] = {}
        self.postings: dict[str, set[str]] = {}
        self.df: Counter[str] = Counter()
        self.lengths = [0, 0]
        self.matrix: tuple[list[Entry], np.ndarray] | None = None

    def refresh(self, rows: dict[str, _Row], language: Language) -> None:
        self.matrix = None if self.stale else self.matrix
        for ref in self.stale:
            doc = self.docs.pop(ref, None)
            if doc is not None:
                self._count(ref, doc, -1)
            row = rows.get(ref)
            if row is not None and row.live:
                text, topics = row.entry.text, row.entry.memory.topics
                self.docs[ref] = doc = ks.KeywordDoc.build(text, topics, language)
                self._count(ref, doc, 1)
        self.stale.clear()

    def _count(self, ref: str, doc: ks.KeywordDoc, sign: int) -> None:
        self.df.update(dict.fromkeys(doc.terms, sign))
        self.lengths[0] += sign * doc.content_len
        self.lengths[1] += sign * doc.topic_len
        for term in doc.terms:
            held = self.postings.setdefault(term, set())
            if sign > 0:
                held.add(ref)
            else:
                held.discard(ref)

    def stats(self, terms: ks.QueryTerms) -> ks.CorpusStats:
        """`CorpusStats.from_docs` of the live rows, for the query's terms."""
        n, (content, topic) = len(self.docs), self.lengths
        average = (max(content / n, 1.0), max(topic / n, 1.0)) if n else (1.0, 1.0)
        return ks.CorpusStats(n, {t: self.df[t] for t in terms.tokens}, *average)

    def keyword(
        self, terms: ks.QueryTerms, rows: dict[str, _Row]
    ) -> list[tuple[Entry, ks.KeywordDoc]]:
        """The live rows holding a query term, in row order (every live row for a query
        without a primary token: the literal phrase fallback may match any of them)."""
        held: Container[str] = self.docs
        if terms.primary:
            held = set().union(*(self.postings.get(t, ()) for t in terms.tokens))
        return [(row.entry, self.docs[ref]) for ref, row in rows.items() if ref in held]

    def vectors(self, rows: dict[str, _Row], vector: np.ndarray) -> tuple[list[Entry], np.ndarray]:
        """The live rows with a vector, and their dot products with `vector`."""
        if self.matrix is None:
            live = [(r.entry, r.vector) for r in rows.values() if r.live and r.vector is not None]
            matrix = np.vstack([v for _, v in live]) if live else np.zeros((0, len(vector)))
            self.matrix = [e for e, _ in live], matrix
        entries, matrix = self.matrix
        return entries, matrix @ vector


@dataclass
class _User(_UserData):
    index: _Index = field(default_factory=_Index)


class LanceDBMemoryService(InMemoryMemoryService):
    """The full contract on an embedded LanceDB directory (created when missing).

    Args:
        path: the database directory.
        embeddings: optional LangChain `Embeddings`; without one search is keyword-only.
        limits: text, topic and capacity limits (see `Limits`).
        language: the tokenizer's language (see `InMemoryMemoryService`).
        dims: the embedder's vector width, which the table is created with; when None,
            one `embed_query` probes it.
        state_rows: memory rows of the users read last kept in memory (their rows,
            history and search index), past which the least recently used are dropped.

    Writes are serialised by this instance's lock, not across processes: open one
    service per directory (it does not declare `CROSS_PROCESS`).
    """

    def __init__(
        self,
        path: str | Path,
        embeddings: Embeddings | None = None,
        *,
        limits: Limits | None = None,
        language: str | Language = "english",
        dims: int | None = None,
        state_rows: int = STATE_ROWS,
    ) -> None:
        super().__init__(embeddings, limits=limits, language=language)
        if embeddings is not None and dims is None:
            dims = len(embeddings.embed_query("dimension probe"))
        self._store = Store(path, dims)
        self._users: OrderedDict[UserKey, _UserData] = OrderedDict()
        self._state_rows = state_rows
        seqs = self._store.scan("true", ["seq"]).column("seq").to_pylist()
        self._writes = itertools.count(max(filter(None, seqs), default=0) + 1)
        self._load_claims()

    @property
    def capabilities(self) -> frozenset[Capability]:
        return super().capabilities | {Capability.DURABLE}

    def close(self) -> None:
        self._users.clear()

    # -- the cache: users loaded on first touch, written through ------------------

    def _find(self, user: UserKey) -> _User:
        data = self._users.get(user)
        if data is None:
            data = self._users[user] = self._load(user)
            total = sum(len(d.rows) for d in self._users.values())
            while len(self._users) > 1 and total > self._state_rows:
                total -= len(self._users.popitem(last=False)[1].rows)
        self._users.move_to_end(user)
        assert isinstance(data, _User)
        return data

    def _load(self, user: UserKey) -> _User:
        """The user's memory rows and history, in write order, from one scan."""
        sql = f"scope = '{scope_of(user)}' AND rec IN ('{MEMORY}', '{HISTORY}')"
        found = self._store.scan(sql).sort_by("seq")
        vectors: Any = [None] * found.num_rows
        if self._store.has_vectors:
            vectors = found.column("vector").combine_chunks().to_numpy(zero_copy_only=False)
            found = found.drop_columns(["vector"])
        data = _User()
        for row, vector in zip(found.to_pylist(), vectors, strict=True):
            if row["rec"] == HISTORY:
                data.history.append(HistoryEvent.model_validate_json(row["body"]))
                continue
            entry = Entry.model_validate_json(row["body"])
            data.rows[entry.id] = _Row(
                entry, row["fp"], row["deleted"], vector, keyed=row["keyed"], seq=row["seq"]
            )
        data.index.stale.update(data.rows)
        return data

    def _memory(self, user: UserKey, row: _Row) -> dict[str, Any]:
        body, fp, vector = row.entry.model_dump_json(), row.fingerprint, row.vector
        more = {"fp": fp, "deleted": row.deleted_at, "keyed": row.keyed, "vector": vector}
        return record(MEMORY, user, row.entry.id, body, seq=row.seq, **more)

    def _commit(self, done: list[tuple[s.Step, Any]]) -> None:
        """Write the plan's memory rows and history in one table version (an append
        when it only inserted); a purge also drops what it removed."""
        user, refs, events, purged = None, set[str](), list[HistoryEvent](), set[str]()
        rewrote = wiped = False
        for step, result in done:
            if isinstance(step, s.Insert):
                refs.update(r.entry.id for r in step.rows)
            elif isinstance(step, (s.Rewrite, s.SetTopics)):
                refs.add(step.target.entry.id)
            elif isinstance(step, s.SoftDelete):
                refs.update(ref for ref, _ in result)
            elif isinstance(step, s.EvictOldest) and result is not None:
                refs.add(result[0])
            elif isinstance(step, s.RecordHistory):
                events.extend(step.events)
            elif isinstance(step, s.Purge):
                wiped |= step.memory_id is None
                refs.add(step.memory_id or "")
                purged.add(step.memory_id or "")
                events = [e for e in events if not wiped and e.memory_id != step.memory_id]
            else:
                continue
            rewrote |= not isinstance(step, (s.Insert, s.RecordHistory))
            user = step.user
        if user is None:
            return
        data, scope = self._users.get(user), scope_of(user)  # None after a purge of the user
        rows = [self._memory(user, data.rows[r]) for r in refs if data and r in data.rows]
        for event in events:
            body = event.model_dump_json()
            rows.append(record(HISTORY, user, event.memory_id, body, seq=next(self._writes)))
        drop = f"scope = '{scope}'" if purged else None
        if purged and not wiped:  # one memory: its row and history
            hashes = ", ".join(f"'{digest(ref)}'" for ref in sorted(purged))
            drop = f"{drop} AND rec IN ('{MEMORY}', '{HISTORY}') AND refh IN ({hashes})"
        self._store.write(rows, fresh=not rewrote, drop=drop)
        if isinstance(data, _User):
            data.index.stale |= refs

    def set_expiry(self, user: UserKey, memory_id: str, expires_at: datetime | None) -> bool:
        user = check_user(user)
        with self._lock:
            if not super().set_expiry(user, memory_id, expires_at):
                return False
            data = self._find(user)
            try:
                self._store.write([self._memory(user, data.rows[memory_id])], fresh=False)
            except BaseException:
                del self._users[user]  # reloaded from the table, which stays the truth
                raise
            data.index.stale.add(memory_id)
            return True

    def users(self, app_name: str | None = None) -> list[UserKey]:
        app = check_app_filter(app_name)
        found = self._store.scan(f"rec = '{MEMORY}' AND deleted IS NULL", ["app", "user"])
        keys = {(r["app"], r["user"]) for r in found.to_pylist() if app in (None, r["app"])}
        return [UserKey(a, u) for a, u in sorted(keys)]

    # -- search: the reference's ranking over the user's index ------------------------

    def search(
        self, user: UserKey, query: str | None = None, options: SearchOptions | None = None
    ) -> list[Entry]:
        user, opts = check_user(user), resolve_options(query, options)
        if not opts.query.strip():
            return []
        vector = None
        if self._embeddings is not None:
            vector = unit_vector(self._embeddings.embed_query(opts.query))
        terms = ks.QueryTerms.of(opts, self.language)
        with self._lock:
            data = self._find(user)
            data.index.refresh(data.rows, self.language)
            stats = data.index.stats(terms)
            pool = data.index.keyword(terms, data.rows) if vector is None or opts.hybrid else []
            near = None if vector is None else data.index.vectors(data.rows, vector)
        scores = score_candidates(terms, [d for _, d in pool], stats)
        hit = np.flatnonzero(scores > 0)
        keyword = [pool[i][0] for i in hit.tolist()], scores[hit]

        def fetch(kind: Kind | None, size: int) -> ks.Legs:
            def keep(entry: Entry) -> bool:
                return (kind is None or entry.memory.kind == kind) and ks.passes_time(
                    entry.memory.event_time, opts.time_after, opts.time_before
                )

            vectors = None if near is None else _top(*near, keep, size)
            return ks.Legs(vectors, _top(*keyword, keep, size))

        return ks.execute_search(opts, fetch, self.language, self._time_mentions)

    # -- cursors, claims and dead letters: the reference's `ClaimTable`, written through --

    def _load_claims(self) -> None:
        """Every cursor, claim and dead letter, into the service's `ClaimTable`."""
        self._claims = table = c.ClaimTable(self._lock)
        sql = f"rec IN ('{CURSOR}', '{CLAIM}', '{LETTER}')"
        for row in self._store.scan(sql, ["rec", "app", "user", "body"]).to_pylist():
            user, body = UserKey(row["app"], row["user"]), row["body"]
            if row["rec"] == CURSOR:
                cursor = _cursor_of(body)
                table.cursors[(user, cursor.thread_id)] = cursor
            elif row["rec"] == CLAIM:
                claim = json.loads(body)
                table.claims[(user, claim.pop("thread_id"))] = c.Claim(**claim)
            else:
                letter = DeadLetter.model_validate_json(body)
                table.letters[letter.id] = letter

    def run_claim_op(self, op: c.ClaimOp[T]) -> T:
        """Run the op on the `ClaimTable`, then write the rows it may have changed (the
        thread's cursor, claim and dead letters, or the retried letter) in one commit."""
        with self._lock:
            result = super().run_claim_op(op)
            if not isinstance(op, (c.GetCursor, c.ListDeadLetters)):
                try:
                    self._store.write(self._claim_rows(op), fresh=False)
                except BaseException:
                    self._load_claims()  # the table stays the truth
                    raise
            return result

    def _claim_rows(self, op: c.ClaimOp[Any]) -> list[dict[str, Any]]:
        table = self._claims
        if isinstance(op, c.RetryDeadLetter):
            found = [table.letters[op.letter_id]] if op.letter_id in table.letters else []
            return [record(LETTER, d.user, d.id, d.model_dump_json()) for d in found]
        assert isinstance(op, (c.OnThread, c.SetCursor))
        user = op.user
        thread = op.cursor.thread_id if isinstance(op, c.SetCursor) else op.thread_id
        letters = [d for d in table.letters.values() if (d.user, d.thread_id) == (user, thread)]
        rows = [record(LETTER, user, d.id, d.model_dump_json()) for d in letters]
        cursor, claim = table.cursors.get((user, thread)), table.claims.get((user, thread))
        if cursor is not None:
            rows.append(record(CURSOR, user, thread, _cursor_json(cursor)))
        if claim is not None:
            body = json.dumps({"thread_id": thread, **asdict(claim)})
            rows.append(record(CLAIM, user, thread, body))
        return rows
