"""SQL text, parameter builders and row converters, shared by the sync and async paths.

Nothing here does I/O. The migrations themselves are in `_migrations.py`; the
setup statements, the backfills some of them run, and the latest ANN function
(a re-embed creates it again) are here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from psycopg.types.json import Jsonb

from ...service.documents import fts_document, keys_of, topics_document
from ...service.language import Language
from ...service.steps import RecordHistory
from ...service.validity import View
from ...types import Entry, HistoryEvent, Kind, Memory, Operation, Source, UserKey

Row = Mapping[str, Any]
Params = dict[str, Any]

# --- migrations ------------------------------------------------------------

CREATE_EXTENSION = "CREATE EXTENSION IF NOT EXISTS vector"

CREATE_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS langmem_migrations (
    scope text NOT NULL,
    version integer NOT NULL,
    checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, version)
)"""

SETUP_LOCK = "SELECT pg_advisory_xact_lock(7316402795)"
APPLIED_MIGRATIONS = "SELECT scope, version, checksum FROM langmem_migrations"
RECORD_MIGRATION = "INSERT INTO langmem_migrations (scope, version, checksum) VALUES (%s, %s, %s)"
EMBEDDING_DIMS = """
SELECT atttypmod AS dims FROM pg_attribute
WHERE attrelid = 'langmem_memories'::regclass AND attname = 'embedding'"""


SELECT_LANGUAGE = "SELECT value FROM langmem_settings WHERE key = 'language'"
SET_LANGUAGE = """INSERT INTO langmem_settings (key, value) VALUES ('language', %(language)s)
ON CONFLICT (key) DO UPDATE SET value = excluded.value"""

DOCS_MIGRATION = 6
"""Core version that added content_doc/topic_doc; applying it runs the Python backfill."""
RETOKENIZE_MIGRATIONS = frozenset({DOCS_MIGRATION, 12})
"""Core versions (6, and 12: stemmed documents) after which setup re-tokenises every row
whose content_doc is NULL."""
KEYS_MIGRATION = 15
"""Core version after which setup re-tokenises the rows with participants or a location
(their keys document now holds them)."""
FINGERPRINT_MIGRATION = 9
"""Core version whose application recomputes ambiguous fingerprints."""

FINGERPRINT_SELECT = """
SELECT app_name, user_id, id, text, kind, event_time, participants, location, keyed
FROM langmem_memories
WHERE (app_name, user_id, id) > (%(app)s, %(user)s, %(id)s)
  AND (strpos(array_to_string(participants, chr(30)), ',') > 0
       OR strpos(array_to_string(participants, chr(30)), chr(31)) > 0
       OR strpos(coalesce(location, ''), chr(31)) > 0 OR (keyed AND strpos(id, chr(31)) > 0))
ORDER BY app_name, user_id, id LIMIT %(limit)s"""

FINGERPRINT_UPDATE = """
UPDATE langmem_memories m SET fingerprint = d.fp
FROM unnest(%(apps)s::text[], %(users)s::text[], %(ids)s::text[], %(fps)s::text[])
    AS d(app_name, user_id, id, fp)
WHERE m.app_name = d.app_name AND m.user_id = d.user_id AND m.id = d.id"""

BACKFILL_SELECT = """
SELECT app_name, user_id, id, text, topics, participants, location FROM langmem_memories
WHERE content_doc IS NULL LIMIT %(limit)s"""

BACKFILL_UPDATE = """
UPDATE langmem_memories m SET content_doc = d.content_doc, topic_doc = d.topic_doc,
    content_terms = string_to_array(d.content_terms, ' '),
    topic_terms = string_to_array(d.topic_terms, ' '),
    content_len = d.content_len, topic_len = d.topic_len
FROM unnest(%(apps)s::text[], %(users)s::text[], %(ids)s::text[], %(content)s::text[],
            %(topic)s::text[], %(content_terms)s::text[], %(topic_terms)s::text[],
            %(content_len)s::int[], %(topic_len)s::int[])
     AS d(app_name, user_id, id, content_doc, topic_doc, content_terms, topic_terms,
          content_len, topic_len)
WHERE m.app_name = d.app_name AND m.user_id = d.user_id AND m.id = d.id"""
"""Terms travel space-joined (tokens never hold a space) so one unnest row is one memory."""

BACKFILL_BATCH = 1_000

VECTOR_SCOPE = "vector"
CORE_SCOPE = "core"


def _ann_candidates_function(dims: int) -> str:
    """The latest `langmem_ann_candidates` (vector migration 6); a re-embed's cutover
    creates it again for the new column."""
    filters = """m.app_name = p_app AND m.user_id = p_user AND m.deleted_at IS NULL
       AND (p_kind IS NULL OR m.kind = p_kind)
       AND (p_after IS NULL OR m.event_time IS NULL OR m.event_time >= p_after)
       AND (p_before IS NULL OR m.event_time IS NULL OR m.event_time <= p_before)
       AND (p_now IS NULL OR (m.superseded_by IS NULL
                              AND (m.valid_to IS NULL OR m.valid_to > p_now)))
       AND (p_as_of IS NULL OR (m.valid_from <= p_as_of
                                AND (m.valid_to IS NULL OR m.valid_to > p_as_of)))"""
    return f"""
CREATE FUNCTION langmem_ann_candidates(
    p_app text, p_user text, p_q vector, p_kind text, p_after timestamptz,
    p_before timestamptz, p_pool integer, p_now timestamptz, p_as_of timestamptz)
RETURNS TABLE (id text, dist float8, version text, updated_at timestamptz, n bigint)
LANGUAGE sql STABLE
SET enable_seqscan = off SET enable_sort = off SET plan_cache_mode = force_custom_plan
AS $$
SELECT c.id, c.dist, c.version, c.updated_at,
       (SELECT s.live_count FROM langmem_user_stats s
        WHERE s.app_name = p_app AND s.user_id = p_user) AS n
FROM (
    (SELECT m.id, m.embedding <=> p_q AS dist, m.xmin::text AS version, m.updated_at
     FROM langmem_memories m
     WHERE {filters} AND m.indexed
     ORDER BY m.embedding::halfvec({dims}) <=> p_q::halfvec({dims})
     LIMIT p_pool)
    UNION ALL
    (SELECT m.id, m.embedding <=> p_q AS dist, m.xmin::text AS version, m.updated_at
     FROM langmem_memories m
     WHERE {filters} AND NOT m.indexed
     ORDER BY dist
     LIMIT p_pool)) c
$$;
"""


# --- writes ----------------------------------------------------------------

USER_LOCK = """
SELECT pg_advisory_xact_lock(hashtextextended(CASE
    WHEN strpos(%(app)s, chr(31)) = 0 AND strpos(%(user)s, chr(31)) = 0
    THEN %(app)s || chr(31) || %(user)s
    ELSE length(%(app)s)::text || chr(31) || %(app)s || chr(31) || %(user)s END, 0))"""
"""The per-user write lock. Its key hashes an injective encoding of the pair: the
historical `app U+001F user` when neither part holds U+001F (exactly one U+001F:
unambiguous, and the key processes of earlier versions take), else the
length-prefixed form, which holds two or more. A collision of the 64-bit hash
itself only serialises two users' writes."""

_COLUMNS = (
    "id, app_name, user_id, text, topics, kind, event_time, participants, location, metadata, "
    "keyed, created_at, updated_at, expires_at, valid_from, valid_to, superseded_by"
)
_WHERE_USER = "app_name = %(app)s AND user_id = %(user)s"

SELECT_LIVE_BY_FINGERPRINT = f"""
SELECT {_COLUMNS} FROM langmem_memories
WHERE {_WHERE_USER} AND fingerprint = %(fp)s AND deleted_at IS NULL AND superseded_by IS NULL"""
"""The current row holding a fingerprint (the unique partial index): superseded versions
keep theirs and are never found by content."""

SELECT_DELETED_BY_FINGERPRINT = f"""
SELECT {_COLUMNS} FROM langmem_memories
WHERE {_WHERE_USER} AND fingerprint = %(fp)s AND deleted_at IS NOT NULL AND superseded_by IS NULL
ORDER BY deleted_at DESC, id LIMIT 1"""

SELECT_PREDECESSOR = f"""
SELECT {_COLUMNS}, deleted_at FROM langmem_memories
WHERE {_WHERE_USER} AND superseded_by = %(id)s AND deleted_at IS NULL
    AND NOT (id = ANY(%(exclude)s::text[]))
ORDER BY write_seq DESC LIMIT 1"""
"""The live version `id` superseded (`FindPredecessor`) whose id is not in `exclude`, by
the partial index on the link; after restores several may name it: the most recently
written."""

SET_VALIDITY = f"""
UPDATE langmem_memories SET valid_to = %(valid_to)s, superseded_by = %(superseded_by)s,
    updated_at = %(now)s, write_seq = nextval('langmem_write_seq')
WHERE {_WHERE_USER} AND id = %(id)s"""
"""Close or reopen a version (`SetValidity`): content, fingerprint and vector stay; it
counts as a write for the evict policy's order, as on the other backends."""

SELECT_BY_ID = (
    f"SELECT {_COLUMNS}, deleted_at FROM langmem_memories WHERE {_WHERE_USER} AND id = %(id)s"
)

SELECT_LIVE_BY_ID = f"{SELECT_BY_ID} AND deleted_at IS NULL"

LIVE_COUNT = f"SELECT live_count FROM langmem_user_stats WHERE {_WHERE_USER}"
"""Rows not deleted, superseded ones included (they take storage): the capacity check's."""

CURRENT_COUNT = f"SELECT current_count FROM langmem_user_stats WHERE {_WHERE_USER}"
"""Rows not deleted and not superseded: `count()`."""

EVICT_OLDEST = f"""
UPDATE langmem_memories SET deleted_at = %(now)s
WHERE {_WHERE_USER} AND id = (
    SELECT id FROM langmem_memories WHERE {_WHERE_USER} AND deleted_at IS NULL
    ORDER BY write_seq LIMIT 1)
RETURNING id, text"""

_CONTENT_SET = (
    "text = %(text)s, fingerprint = %(fp)s, topics = %(topics)s, kind = %(kind)s, "
    "event_time = %(event_time)s, participants = %(participants)s, location = %(location)s, "
    "metadata = %(metadata)s, content_terms = %(content_terms)s, topic_terms = %(topic_terms)s, "
    "content_len = %(content_len)s, topic_len = %(topic_len)s, content_doc = %(content_doc)s, "
    "topic_doc = %(topic_doc)s, updated_at = %(now)s, write_seq = nextval('langmem_write_seq')"
)

INSERT_MEMORY = """
INSERT INTO langmem_memories (
    app_name, user_id, id, text, fingerprint, keyed, topics, kind, event_time, participants,
    location, metadata, embedding, content_terms, topic_terms, content_len, topic_len,
    content_doc, topic_doc, created_at, updated_at, expires_at, valid_from, valid_to,
    superseded_by)
VALUES (
    %(app)s, %(user)s, %(id)s, %(text)s, %(fp)s, %(keyed)s, %(topics)s, %(kind)s, %(event_time)s,
    %(participants)s, %(location)s, %(metadata)s, %(embedding)b::vector, %(content_terms)s,
    %(topic_terms)s, %(content_len)s, %(topic_len)s, %(content_doc)s, %(topic_doc)s, %(created)s,
    %(updated)s, %(expires)s, %(valid_from)s, %(valid_to)s, %(superseded_by)s)"""
"""One row exactly as given: id, timestamps, expiry and validity (add, add_many and restore)."""

KNOWN_FINGERPRINTS = f"""
SELECT f.fp AS fingerprint FROM unnest(%(fps)s::text[]) AS f(fp)
WHERE EXISTS (SELECT 1 FROM langmem_memories
              WHERE {_WHERE_USER} AND fingerprint = f.fp AND deleted_at IS NULL
                AND superseded_by IS NULL)
   OR EXISTS (SELECT 1 FROM langmem_memories
              WHERE {_WHERE_USER} AND fingerprint = f.fp AND deleted_at IS NOT NULL)
   OR EXISTS (SELECT 1 FROM langmem_memories
              WHERE {_WHERE_USER} AND fingerprint = f.fp AND superseded_by IS NOT NULL)"""
"""Index probes per fingerprint (the current, the deleted and the superseded partial
index: together every row), whatever
the statistics: `fingerprint = ANY(array)` under the generic plans the service's pools
force compared each of the user's rows with every element, so `add_many` of 1,000
memories for a user of 10,000 spent 0.4 s here."""

ROWS_BY_IDS = f"""
SELECT {_COLUMNS}, xmin::text AS version FROM langmem_memories
WHERE {_WHERE_USER} AND id = ANY(%(ids)s::text[]) AND deleted_at IS NULL"""
"""Full rows of search candidates the entry cache does not hold at their current version."""

PENDING_BATCH = """
WITH batch AS (
    SELECT ctid FROM langmem_memories
    WHERE deleted_at IS NULL AND NOT indexed
      AND (%(app)s::text IS NULL OR (app_name = %(app)s AND user_id = %(user)s))
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED)
UPDATE langmem_memories m SET indexed = true
FROM batch b
WHERE m.ctid = b.ctid
RETURNING 1"""
"""One batch of deferred rows into the HNSW graph (the UPDATE inserts them into it). The
batch's rows are locked, so their `ctid` stays put, and the join is a TID scan: just after a
bulk load the statistics are stale, and a join on the key was planned as a scan of the
user's rows per row (4.5 s for 3,000 rows)."""

PENDING_COUNT = """
SELECT count(*) AS n FROM langmem_memories
WHERE deleted_at IS NULL AND NOT indexed
  AND (%(app)s::text IS NULL OR (app_name = %(app)s AND user_id = %(user)s))"""

REWRITE_MEMORY = f"""
UPDATE langmem_memories SET {_CONTENT_SET}, embedding = %(embedding)b::vector, deleted_at = NULL,
    indexed = true
WHERE {_WHERE_USER} AND id = %(id)s
RETURNING {_COLUMNS}"""

SET_TOPICS = f"""
UPDATE langmem_memories SET topics = %(topics)s, topic_terms = %(topic_terms)s,
    topic_len = %(topic_len)s, topic_doc = %(topic_doc)s, updated_at = %(now)s,
    write_seq = nextval('langmem_write_seq')
WHERE {_WHERE_USER} AND id = %(id)s
RETURNING {_COLUMNS}"""

SOFT_DELETE = f"""
UPDATE langmem_memories SET deleted_at = %(now)s
WHERE {_WHERE_USER} AND id = %(id)s AND deleted_at IS NULL
RETURNING id, text"""

INSERT_HISTORY = """
INSERT INTO langmem_history (app_name, user_id, memory_id, operation, text_before, text_after, at, source)
SELECT %(app)s, %(user)s, e.id, e.op, e.before, e.after, e.at, e.source
FROM unnest(%(ids)s::text[], %(ops)s::text[], %(befores)s::text[], %(afters)s::text[],
    %(ats)s::timestamptz[], %(sources)s::jsonb[]) WITH ORDINALITY
    AS e(id, op, before, after, at, source, n)
ORDER BY e.n"""
"""History events of one user, in order, in one statement (`history_params`)."""

SOFT_DELETE_ALL = f"""
UPDATE langmem_memories SET deleted_at = %(now)s
WHERE {_WHERE_USER} AND deleted_at IS NULL
RETURNING id, text"""

PURGE_ONE = f"""
WITH gone AS (DELETE FROM langmem_memories WHERE {_WHERE_USER} AND id = %(id)s RETURNING id),
     history AS (DELETE FROM langmem_history WHERE {_WHERE_USER} AND memory_id = %(id)s)
SELECT count(*) AS n FROM gone"""

PURGE_USER = f"""
WITH gone AS (DELETE FROM langmem_memories WHERE {_WHERE_USER} RETURNING id),
     history AS (DELETE FROM langmem_history WHERE {_WHERE_USER}),
     cursors AS (DELETE FROM langmem_cursors WHERE {_WHERE_USER}),
     claims AS (DELETE FROM langmem_thread_claims WHERE {_WHERE_USER}),
     letters AS (DELETE FROM langmem_dead_letters WHERE {_WHERE_USER})
SELECT count(*) AS n FROM gone"""

DELETE_STATS = f"DELETE FROM langmem_user_stats WHERE {_WHERE_USER}"

DELETE_TERMS = f"DELETE FROM langmem_user_terms WHERE {_WHERE_USER}"

# --- reads -----------------------------------------------------------------

VIEW_FILTERS = {
    "current": " AND superseded_by IS NULL AND (valid_to IS NULL OR valid_to > %(now)s)",
    "as_of": " AND valid_from <= %(as_of)s AND (valid_to IS NULL OR valid_to > %(as_of)s)",
    "all": "",
}
"""The validity view's condition (`service.validity`), by `view_name`: a statement text
per view, so the current view's `superseded_by IS NULL` matches the partial indexes
even in a generic plan. `%(now)s` is the client's clock, as for expiry."""

READ_LIVE = {
    name: f"""
SELECT {_COLUMNS} FROM langmem_memories WHERE {_WHERE_USER} AND deleted_at IS NULL{where}
ORDER BY updated_at DESC, created_at DESC, id DESC LIMIT %(limit)s"""
    for name, where in VIEW_FILTERS.items()
}
"""`read()` per view (the current one walks `langmem_memories_current`)."""

READ_DELETED = f"""
SELECT {_COLUMNS} FROM langmem_memories WHERE {_WHERE_USER} AND deleted_at IS NOT NULL
ORDER BY deleted_at DESC, id DESC LIMIT %(limit)s"""

SELECT_HISTORY = f"""
SELECT memory_id, operation, text_before, text_after, at, source FROM langmem_history
WHERE {_WHERE_USER} AND memory_id = %(id)s ORDER BY seq"""

SELECT_USERS = """
SELECT app_name, user_id FROM langmem_user_stats
WHERE current_count > 0 AND (%(app)s::text IS NULL OR app_name = %(app)s)
ORDER BY app_name, user_id"""


def user_params(user: UserKey, **extra: Any) -> Params:
    return {"app": user.app_name, "user": user.user_id, **extra}


def validity_params(entry: Entry) -> Params:
    """An inserted row's validity, exactly as the entry holds it."""
    return {
        "valid_from": entry.valid_from,
        "valid_to": entry.valid_to,
        "superseded_by": entry.superseded_by,
    }


def view_name(view: View) -> str:
    """Which of `VIEW_FILTERS` a view reads."""
    if view.include_superseded:
        return "all"
    return "current" if view.as_of is None else "as_of"


def view_params(view: View, now: datetime) -> Params:
    """The view's parameters: `now` for the current view, `as_of` for a past one (the
    other None, both None for every version: `langmem_ann_candidates` reads them so)."""
    name = view_name(view)
    return {"now": now if name == "current" else None, "as_of": view.as_of}


def vector_param(vector: Sequence[float] | None) -> list[float] | None:
    """A vector as a binary float8[] parameter (`%(name)b::vector` in SQL, pgvector casts it):
    no adapter registration, and no text formatting of 384 floats (~0.27 ms a vector)."""
    if vector is None:
        return None
    return [float(x) for x in vector]


def keyword_columns(text: str, topics: Sequence[str], language: Language) -> Params:
    """Pre-tokenised fields, from one tokenizer pass (in the service's `language`; `topics`
    is the keys field, `keys_of(memory)`): the
    tsvector's terms, the BM25 lengths and the stored documents the keyword score is
    rebuilt from (`keyword_doc`)."""
    content_doc = fts_document(text, language)
    content = content_doc.split()
    return {
        "content_terms": sorted(set(content)),
        "content_len": len(content),
        "content_doc": content_doc,
        **_topic_columns(topics, language),
    }


def _topic_columns(topics: Sequence[str], language: Language) -> Params:
    topic_doc = topics_document(topics, language)
    tokens = topic_doc.split()
    return {"topic_terms": sorted(set(tokens)), "topic_len": len(tokens), "topic_doc": topic_doc}


def topic_params(memory: Memory, language: Language) -> Params:
    return {"topics": list(memory.topics), **_topic_columns(keys_of(memory), language)}


def memory_params(
    memory: Memory, fp: str, embedding: Sequence[float] | None, language: Language
) -> Params:
    return {
        "text": memory.text,
        "fp": fp,
        "topics": list(memory.topics),
        "kind": memory.kind.value,
        "event_time": memory.event_time,
        "participants": list(memory.participants),
        "location": memory.location,
        "metadata": Jsonb(memory.metadata),
        "embedding": vector_param(embedding),
        **keyword_columns(memory.text, keys_of(memory), language),
    }


def history_params(step: RecordHistory) -> Params:
    events = step.events
    return user_params(
        step.user,
        ids=[e.memory_id for e in events],
        ops=[e.operation.value for e in events],
        befores=[e.text_before for e in events],
        afters=[e.text_after for e in events],
        ats=[e.at for e in events],
        sources=[source_json(e.source) for e in events],
    )


def source_json(source: Source | None) -> Jsonb | None:
    return None if source is None else Jsonb(source.model_dump(mode="json"))


# --- row converters -----------------------------------------------------------


def _utc(value: datetime) -> datetime:
    return value.astimezone(timezone.utc)


def utc_or_none(value: datetime | None) -> datetime | None:
    return None if value is None else _utc(value)


def entry_from_row(row: Row) -> Entry:
    memory = Memory.model_construct(
        text=row["text"],
        topics=list(row["topics"]),
        kind=Kind(row["kind"]),
        event_time=utc_or_none(row["event_time"]),
        participants=list(row["participants"]),
        location=row["location"],
        metadata=dict(row["metadata"] or {}),
    )
    return Entry.model_construct(
        id=row["id"],
        app_name=row["app_name"],
        user_id=row["user_id"],
        memory=memory,
        created_at=_utc(row["created_at"]),
        updated_at=_utc(row["updated_at"]),
        score=None,
        rrf_score=None,
        expires_at=utc_or_none(row.get("expires_at")),
        valid_from=_utc(row["valid_from"]),
        valid_to=utc_or_none(row["valid_to"]),
        superseded_by=row["superseded_by"],
    )


def history_from_row(row: Row) -> HistoryEvent:
    source = row["source"]
    return HistoryEvent(
        memory_id=row["memory_id"],
        operation=Operation(row["operation"]),
        text_before=row["text_before"],
        text_after=row["text_after"],
        at=_utc(row["at"]),
        source=None if source is None else Source.model_validate(source),
    )
