"""The schema's migrations, in order: `MIGRATIONS` (core) and `vector_migrations(dims)`.

Nothing here does I/O; `_plans.setup` applies them. `MIGRATIONS` is append-only:
position in the list is the version recorded in `langmem_migrations`; a shipped
entry is never edited (a test pins their checksums). `vector_migrations(dims)` is
the second, dimension-templated scope, applied once an embedder fixes the dimension.
"""

from __future__ import annotations

import hashlib

from ._sql import _ann_candidates_function

MIGRATIONS: list[str] = [
    # 1: memories. content_terms/topic_terms hold the package tokenizer's output
    # (service/text.py), so CJK bigrams and stopwords match the other backends;
    # the tsvector is built from them verbatim, with no PostgreSQL parsing.
    """
CREATE TABLE langmem_memories (
    app_name text NOT NULL,
    user_id text NOT NULL,
    id text NOT NULL,
    text text NOT NULL,
    fingerprint text NOT NULL,
    keyed boolean NOT NULL DEFAULT false,
    topics text[] NOT NULL DEFAULT '{}',
    kind text NOT NULL,
    event_time timestamptz,
    participants text[] NOT NULL DEFAULT '{}',
    location text,
    metadata jsonb NOT NULL DEFAULT '{}',
    embedding vector,
    content_terms text[] NOT NULL DEFAULT '{}',
    topic_terms text[] NOT NULL DEFAULT '{}',
    content_len integer NOT NULL DEFAULT 0,
    topic_len integer NOT NULL DEFAULT 0,
    tsv tsvector GENERATED ALWAYS AS (
        setweight(array_to_tsvector(content_terms), 'A') || setweight(array_to_tsvector(topic_terms), 'B')
    ) STORED,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    deleted_at timestamptz,
    PRIMARY KEY (app_name, user_id, id)
);
CREATE INDEX langmem_memories_user_updated ON langmem_memories (app_name, user_id, updated_at);
CREATE UNIQUE INDEX langmem_memories_live_fingerprint
    ON langmem_memories (app_name, user_id, fingerprint) WHERE deleted_at IS NULL;
CREATE INDEX langmem_memories_tsv ON langmem_memories USING gin (tsv);
""",
    # 2: history events, oldest first by seq.
    """
CREATE TABLE langmem_history (
    seq bigserial PRIMARY KEY,
    app_name text NOT NULL,
    user_id text NOT NULL,
    memory_id text NOT NULL,
    operation text NOT NULL,
    text_before text,
    text_after text,
    at timestamptz NOT NULL,
    source jsonb
);
CREATE INDEX langmem_history_memory ON langmem_history (app_name, user_id, memory_id, seq);
""",
    # 3: extraction cursors of the write path.
    """
CREATE TABLE langmem_cursors (
    app_name text NOT NULL,
    user_id text NOT NULL,
    thread_id text NOT NULL,
    last_message_id text,
    last_message_digest text,
    message_count integer NOT NULL DEFAULT 0,
    last_extracted_at timestamptz,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (app_name, user_id, thread_id)
);
""",
    # 4: per-user live count and field lengths (BM25 corpus stats, count(), users(),
    # the exact-vs-HNSW choice), kept by statement-level triggers so bulk loads
    # pay once per statement, not once per row.
    """
CREATE TABLE langmem_user_stats (
    app_name text NOT NULL,
    user_id text NOT NULL,
    live_count bigint NOT NULL DEFAULT 0,
    content_len_sum bigint NOT NULL DEFAULT 0,
    topic_len_sum bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (app_name, user_id)
);
CREATE FUNCTION langmem_apply_stats() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        INSERT INTO langmem_user_stats AS s (app_name, user_id, live_count, content_len_sum, topic_len_sum)
        SELECT app_name, user_id, -count(*), -sum(content_len), -sum(topic_len)
        FROM old_rows WHERE deleted_at IS NULL GROUP BY app_name, user_id
        ON CONFLICT (app_name, user_id) DO UPDATE SET
            live_count = s.live_count + excluded.live_count,
            content_len_sum = s.content_len_sum + excluded.content_len_sum,
            topic_len_sum = s.topic_len_sum + excluded.topic_len_sum;
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') THEN
        INSERT INTO langmem_user_stats AS s (app_name, user_id, live_count, content_len_sum, topic_len_sum)
        SELECT app_name, user_id, count(*), sum(content_len), sum(topic_len)
        FROM new_rows WHERE deleted_at IS NULL GROUP BY app_name, user_id
        ON CONFLICT (app_name, user_id) DO UPDATE SET
            live_count = s.live_count + excluded.live_count,
            content_len_sum = s.content_len_sum + excluded.content_len_sum,
            topic_len_sum = s.topic_len_sum + excluded.topic_len_sum;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER langmem_stats_insert AFTER INSERT ON langmem_memories
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION langmem_apply_stats();
CREATE TRIGGER langmem_stats_update AFTER UPDATE ON langmem_memories
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION langmem_apply_stats();
CREATE TRIGGER langmem_stats_delete AFTER DELETE ON langmem_memories
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION langmem_apply_stats();
""",
    # 5: per-user document frequency of every term among live rows, so BM25's idf
    # is an index lookup instead of a GIN count over a heavy user's rows.
    """
CREATE TABLE langmem_user_terms (
    app_name text NOT NULL,
    user_id text NOT NULL,
    term text NOT NULL,
    df bigint NOT NULL,
    PRIMARY KEY (app_name, user_id, term)
);
CREATE FUNCTION langmem_apply_terms() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO langmem_user_terms AS s (app_name, user_id, term, df)
        SELECT r.app_name, r.user_id, t.term, count(*)
        FROM new_rows r CROSS JOIN LATERAL (SELECT DISTINCT unnest(r.content_terms || r.topic_terms) AS term) t
        WHERE r.deleted_at IS NULL GROUP BY 1, 2, 3
        ON CONFLICT (app_name, user_id, term) DO UPDATE SET df = s.df + excluded.df;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO langmem_user_terms AS s (app_name, user_id, term, df)
        SELECT r.app_name, r.user_id, t.term, -count(*)
        FROM old_rows r CROSS JOIN LATERAL (SELECT DISTINCT unnest(r.content_terms || r.topic_terms) AS term) t
        WHERE r.deleted_at IS NULL GROUP BY 1, 2, 3
        ON CONFLICT (app_name, user_id, term) DO UPDATE SET df = s.df + excluded.df;
    ELSE
        INSERT INTO langmem_user_terms AS s (app_name, user_id, term, df)
        SELECT app_name, user_id, term, sum(delta) FROM (
            SELECT r.app_name, r.user_id, t.term, -1 AS delta
            FROM old_rows r CROSS JOIN LATERAL (SELECT DISTINCT unnest(r.content_terms || r.topic_terms) AS term) t
            WHERE r.deleted_at IS NULL
            UNION ALL
            SELECT r.app_name, r.user_id, t.term, 1
            FROM new_rows r CROSS JOIN LATERAL (SELECT DISTINCT unnest(r.content_terms || r.topic_terms) AS term) t
            WHERE r.deleted_at IS NULL) d
        GROUP BY 1, 2, 3 HAVING sum(delta) <> 0
        ON CONFLICT (app_name, user_id, term) DO UPDATE SET df = s.df + excluded.df;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER langmem_terms_insert AFTER INSERT ON langmem_memories
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION langmem_apply_terms();
CREATE TRIGGER langmem_terms_update AFTER UPDATE ON langmem_memories
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION langmem_apply_terms();
CREATE TRIGGER langmem_terms_delete AFTER DELETE ON langmem_memories
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION langmem_apply_terms();
""",
    # 6: the package tokenizer's documents (primary tokens in order, then CJK
    # trigrams, space separated), so a keyword candidate's `KeywordDoc` is rebuilt
    # by splitting, not by tokenising again at query time. NULL until backfilled
    # (`BACKFILL_UPDATE`, run by setup); readers tokenise such rows as before.
    """
ALTER TABLE langmem_memories ADD COLUMN content_doc text, ADD COLUMN topic_doc text;
""",
    # 7: deferred indexing for bulk loads. Rows written by `add_many(defer_index=True)`
    # have indexed = false: the HNSW index (vector migration 4) leaves them out, so the
    # load pays no graph maintenance, and searches read them by an exact scan of the
    # user's pending rows (this partial btree) until `index_pending()` flips them.
    """
ALTER TABLE langmem_memories ADD COLUMN indexed boolean NOT NULL DEFAULT true;
CREATE INDEX langmem_memories_pending ON langmem_memories (app_name, user_id)
    WHERE deleted_at IS NULL AND NOT indexed;
""",
    # 8: the "evict" capacity policy takes the least recently written memory by
    # write_seq, a sequence every insert and content write draws from, so a wall
    # clock stepping backwards cannot make the newest memory look oldest. Existing
    # rows are numbered in their old order (updated_at, created_at, id).
    """
CREATE SEQUENCE langmem_write_seq;
ALTER TABLE langmem_memories ADD COLUMN write_seq bigint;
UPDATE langmem_memories m SET write_seq = o.n
FROM (SELECT app_name, user_id, id, row_number() OVER (ORDER BY updated_at, created_at, id) AS n
      FROM langmem_memories) o
WHERE m.app_name = o.app_name AND m.user_id = o.user_id AND m.id = o.id;
SELECT setval('langmem_write_seq', coalesce((SELECT max(write_seq) FROM langmem_memories), 0) + 1, false);
ALTER TABLE langmem_memories ALTER COLUMN write_seq SET DEFAULT nextval('langmem_write_seq'),
    ALTER COLUMN write_seq SET NOT NULL;
ALTER SEQUENCE langmem_write_seq OWNED BY langmem_memories.write_seq;
CREATE INDEX langmem_memories_user_write_seq ON langmem_memories (app_name, user_id, write_seq)
    WHERE deleted_at IS NULL;
""",
    # 9: fingerprints of rows whose participants, location or explicit id could be
    # read two ways (a participant holding a comma, U+001F anywhere) are recomputed
    # in the unambiguous encoding by a Python pass (`_plans.backfill_fingerprints`,
    # run when this version is applied), so adding their content again finds them.
    """
COMMENT ON COLUMN langmem_memories.fingerprint IS
    'service._core.fingerprint: sha256 of the normalised content, unambiguous encoding (recomputed by the fingerprint migration)';
""",
    # (cursor) extraction cursors record the covered messages' keys; thread claims
    # with failed-attempt counts; dead letters (backends/postgres/_claims.py).
    """
ALTER TABLE langmem_cursors ADD COLUMN message_keys bytea, ADD COLUMN retired_keys bytea,
    ADD COLUMN pending_retries integer NOT NULL DEFAULT 0;
CREATE TABLE langmem_thread_claims (
    app_name text NOT NULL,
    user_id text NOT NULL,
    thread_id text NOT NULL,
    owner text,
    expires_at timestamptz,
    batch text,
    attempts integer NOT NULL DEFAULT 0,
    last_error text,
    PRIMARY KEY (app_name, user_id, thread_id)
);
CREATE TABLE langmem_dead_letters (
    id text PRIMARY KEY,
    app_name text NOT NULL,
    user_id text NOT NULL,
    thread_id text NOT NULL,
    status text NOT NULL,
    error text NOT NULL,
    attempts integer NOT NULL,
    message_ids text[] NOT NULL,
    messages jsonb NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL
);
CREATE INDEX langmem_dead_letters_thread
    ON langmem_dead_letters (app_name, user_id, thread_id, status);
CREATE INDEX langmem_dead_letters_created ON langmem_dead_letters (created_at, id);
""",
    # 11: expires_at (MemoryStore's TTL; read and written by _expiry.py only). NULL: never.
    """
ALTER TABLE langmem_memories ADD COLUMN expires_at timestamptz;
CREATE INDEX langmem_memories_expiring ON langmem_memories (app_name, user_id, expires_at)
    WHERE expires_at IS NOT NULL AND deleted_at IS NULL;
""",
    """
-- stemmed keyword documents: the tokenizer Snowball-stems Latin words, so every
-- row's documents, terms and lengths are rebuilt by setup (`BACKFILL_UPDATE`);
-- the statement triggers keep langmem_user_terms and langmem_user_stats in step
UPDATE langmem_memories SET content_doc = NULL, topic_doc = NULL;
""",
    """
-- the tokenizer's language, which every stored document depends on: a database set up
-- before has English documents; setup() records the service's language instead when it
-- creates the database, and refuses another language later (`check_language`)
CREATE TABLE langmem_settings (key text PRIMARY KEY, value text NOT NULL);
INSERT INTO langmem_settings (key, value) VALUES ('language', 'english');
""",
    """
-- soft-deleted rows by fingerprint (the live ones have langmem_memories_live_fingerprint):
-- the revive lookups of add and add_many probe it instead of scanning the user's rows
CREATE INDEX langmem_memories_deleted_fingerprint
    ON langmem_memories (app_name, user_id, fingerprint) WHERE deleted_at IS NOT NULL;
""",
    """
-- participants and location are searchable: they join the topics in the keys document
-- (topic_doc and topic_terms, `_documents.memory_keys`); setup re-tokenises the rows
-- holding either (`BACKFILL_UPDATE`), the statement triggers keep the user's stats
UPDATE langmem_memories SET content_doc = NULL, topic_doc = NULL
WHERE cardinality(participants) > 0 OR location IS NOT NULL;
""",
    # 16: validity (service/validity.py): business time and supersede links. Existing rows
    # become current versions that began at their event time, else their creation. The
    # backfill changes no content or liveness, so the stats and terms triggers (net zero,
    # and a scan of every row's terms) are off while it runs. The live-fingerprint
    # uniqueness becomes uniqueness among current rows (built before the old index goes,
    # so it never lapses); superseded rows keep their fingerprints (their own index, which
    # `KNOWN_FINGERPRINTS` probes). langmem_user_stats.current_count is count()'s number.
    """
ALTER TABLE langmem_memories ADD COLUMN valid_from timestamptz, ADD COLUMN valid_to timestamptz,
    ADD COLUMN superseded_by text;
ALTER TABLE langmem_memories DISABLE TRIGGER langmem_stats_update,
    DISABLE TRIGGER langmem_terms_update;
UPDATE langmem_memories SET valid_from = COALESCE(event_time, created_at);
ALTER TABLE langmem_memories ENABLE TRIGGER langmem_stats_update,
    ENABLE TRIGGER langmem_terms_update;
ALTER TABLE langmem_memories ALTER COLUMN valid_from SET NOT NULL;
CREATE UNIQUE INDEX langmem_memories_current_fingerprint
    ON langmem_memories (app_name, user_id, fingerprint)
    WHERE deleted_at IS NULL AND superseded_by IS NULL;
DROP INDEX langmem_memories_live_fingerprint;
CREATE INDEX langmem_memories_superseded_fingerprint
    ON langmem_memories (app_name, user_id, fingerprint) WHERE superseded_by IS NOT NULL;
CREATE INDEX langmem_memories_predecessor
    ON langmem_memories (app_name, user_id, superseded_by) WHERE superseded_by IS NOT NULL;
CREATE INDEX langmem_memories_current
    ON langmem_memories (app_name, user_id, updated_at)
    WHERE deleted_at IS NULL AND superseded_by IS NULL;
ALTER TABLE langmem_user_stats ADD COLUMN current_count bigint NOT NULL DEFAULT 0;
UPDATE langmem_user_stats SET current_count = live_count;
CREATE OR REPLACE FUNCTION langmem_apply_stats() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        INSERT INTO langmem_user_stats AS s
            (app_name, user_id, live_count, current_count, content_len_sum, topic_len_sum)
        SELECT app_name, user_id, -count(*), -count(*) FILTER (WHERE superseded_by IS NULL),
               -sum(content_len), -sum(topic_len)
        FROM old_rows WHERE deleted_at IS NULL GROUP BY app_name, user_id
        ON CONFLICT (app_name, user_id) DO UPDATE SET
            live_count = s.live_count + excluded.live_count,
            current_count = s.current_count + excluded.current_count,
            content_len_sum = s.content_len_sum + excluded.content_len_sum,
            topic_len_sum = s.topic_len_sum + excluded.topic_len_sum;
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') THEN
        INSERT INTO langmem_user_stats AS s
            (app_name, user_id, live_count, current_count, content_len_sum, topic_len_sum)
        SELECT app_name, user_id, count(*), count(*) FILTER (WHERE superseded_by IS NULL),
               sum(content_len), sum(topic_len)
        FROM new_rows WHERE deleted_at IS NULL GROUP BY app_name, user_id
        ON CONFLICT (app_name, user_id) DO UPDATE SET
            live_count = s.live_count + excluded.live_count,
            current_count = s.current_count + excluded.current_count,
            content_len_sum = s.content_len_sum + excluded.content_len_sum,
            topic_len_sum = s.topic_len_sum + excluded.topic_len_sum;
    END IF;
    RETURN NULL;
END $$;
""",
]


def vector_migrations(dims: int) -> list[str]:
    """Append-only like MIGRATIONS; fixes the column dimension, then builds the HNSW index."""
    return [
        f"ALTER TABLE langmem_memories ALTER COLUMN embedding TYPE vector({int(dims)})",
        """
CREATE INDEX langmem_memories_embedding_hnsw ON langmem_memories
    USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)
    WHERE deleted_at IS NULL
""",
        # 3: the HNSW graph over half-precision copies: ~1.2x faster inserts (the graph
        # maintenance dominates bulk ingest), half the index size, the same recall@10
        # at ef_search 200 (docs/bench-postgres.md, round 3). Distances returned
        # to callers stay exact (full-precision column).
        f"""
CREATE INDEX langmem_memories_embedding_hnsw_half ON langmem_memories
    USING hnsw ((embedding::halfvec({int(dims)})) halfvec_cosine_ops)
    WITH (m = 16, ef_construction = 64) WHERE deleted_at IS NULL;
DROP INDEX langmem_memories_embedding_hnsw;
""",
        # 4: the same graph, over indexed rows only (core migration 7): a deferred bulk
        # load adds nothing to it until `index_pending()`.
        f"""
CREATE INDEX langmem_memories_embedding_hnsw_ready ON langmem_memories
    USING hnsw ((embedding::halfvec({int(dims)})) halfvec_cosine_ops)
    WITH (m = 16, ef_construction = 64) WHERE deleted_at IS NULL AND indexed;
DROP INDEX langmem_memories_embedding_hnsw_half;
""",
        # 5: a heavy user's vector candidates in one statement: the HNSW scan over
        # indexed rows, pinned to the index by the function's own planner settings,
        # plus an exact scan of rows a deferred load left pending. pgvector charges
        # the HNSW scan in proportion to hnsw.ef_search, so without the pin the
        # planner prefers an exact seq scan + sort up to ~15k rows (17-20 ms instead
        # of ~2 ms at 10k rows). SET clauses apply while the function runs, so the
        # statement that calls it keeps its own plan, with no transaction around it.
        _ann_candidates_v1(int(dims)),
        # 6: the same, with the validity view inside (core migration 16): `p_now` set
        # filters current rows at that time, `p_as_of` set what was true then, neither:
        # every version. The function plans each call with its arguments as constants
        # (force_custom_plan), so the unused view's test folds away.
        _ANN_V1_DROP + _ann_candidates_function(int(dims)),
    ]


_ANN_V1_DROP = """
DROP FUNCTION langmem_ann_candidates(text, text, vector, text, timestamptz, timestamptz, integer);"""


def _ann_candidates_v1(dims: int) -> str:
    """Vector migration 5's function, as shipped (replaced by migration 6)."""
    filters = """m.app_name = p_app AND m.user_id = p_user AND m.deleted_at IS NULL
       AND (p_kind IS NULL OR m.kind = p_kind)
       AND (p_after IS NULL OR m.event_time IS NULL OR m.event_time >= p_after)
       AND (p_before IS NULL OR m.event_time IS NULL OR m.event_time <= p_before)"""
    return f"""
CREATE FUNCTION langmem_ann_candidates(
    p_app text, p_user text, p_q vector, p_kind text, p_after timestamptz,
    p_before timestamptz, p_pool integer)
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


def checksum(sql: str) -> str:
    """What `langmem_migrations` records, so an edited shipped migration is detectable."""
    return hashlib.sha256(sql.strip().encode()).hexdigest()[:16]
