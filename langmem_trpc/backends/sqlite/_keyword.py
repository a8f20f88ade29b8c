"""The keyword leg's bridge to FTS5: scope tokens and safe MATCH strings.

FTS5's `ascii` tokenizer, which splits only on ASCII non-alphanumerics, indexes the
package tokenizer's documents (tokens joined by spaces): FTS sees exactly the shared
scorer's tokens, and a `KeywordDoc` is split back from a stored document. A per-user
prefix on each term keeps a MATCH, and a term's document count, to one user. MATCH
strings hold only quoted tokens, never user text.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterable

from ...service.documents import fts_document, memory_keys, topics_document
from ...service.language import ENGLISH, Language
from ...types import UserKey


def scope_prefix(user: UserKey) -> str:
    """Prefix of every FTS term of one (app_name, user_id): a term never spans two users."""
    return scope_prefix_of(user.app_name, user.user_id)


def scope_prefix_of(app_name: str, user_id: str) -> str:
    """`scope_prefix` of a pair, the SQL function `lm_scope` (migration 3): 17 ASCII
    characters hashed from an injective encoding of the pair (a shared prefix would merge
    two users' document frequencies; the scheme is explained in docs/backends.md). Pairs
    without U+001F keep the historical `scope_prefix_v1`, so files keep their index.
    """
    if "\x1f" not in app_name and "\x1f" not in user_id:
        return scope_prefix_v1(app_name, user_id)
    encoded = f"{len(app_name)}\x1f{app_name}\x1f{user_id}"
    return "u" + hashlib.sha256(encoded.encode()).hexdigest()[:16]


def scope_prefix_v1(app_name: str, user_id: str) -> str:
    """The prefix before migration 3 (ambiguous when an id holds U+001F); SQL `lm_scope_v1`."""
    digest = hashlib.sha256(f"{app_name}\x1f{user_id}".encode()).hexdigest()
    return "u" + digest[:16]


def scoped(prefix: str, document: str) -> str:
    """The document as indexed: each token behind the user's prefix (documents are tokens
    joined by single spaces, `fts_document`, so a replace prefixes them all)."""
    if not document:
        return ""
    return prefix + document.replace(" ", " " + prefix)


def match_any(prefix: str, tokens: Iterable[str]) -> str:
    """Rows of the user holding any of the tokens, in content or topics (each quoted)."""
    return " OR ".join('"' + (prefix + t).replace('"', '""') + '"' for t in tokens)


def register_functions(conn: sqlite3.Connection, language: Language = ENGLISH) -> None:
    """The package tokenizer (in the service's `language`) as SQL functions, for
    statements and migrations that rebuild keyword documents: lm_scoped(prefix, doc),
    lm_scope(app, user), lm_content_doc(text), lm_topic_doc(topics_json) (topics alone),
    lm_keys_doc(topics_json, participants_json, location) (the keys field, `memory_keys`),
    lm_doc_len(doc)."""

    def content_doc(text: str) -> str:
        return fts_document(text, language)

    def topic_doc(topics_json: str) -> str:
        return topics_document(json.loads(topics_json), language)

    def keys_doc(topics_json: str, participants_json: str, location: str | None) -> str:
        keys = memory_keys(json.loads(topics_json), json.loads(participants_json), location)
        return topics_document(keys, language)

    conn.create_function("lm_scoped", 2, scoped, deterministic=True)
    conn.create_function("lm_scope", 2, scope_prefix_of, deterministic=True)
    conn.create_function("lm_content_doc", 1, content_doc, deterministic=True)
    conn.create_function("lm_topic_doc", 1, topic_doc, deterministic=True)
    conn.create_function("lm_keys_doc", 3, keys_doc, deterministic=True)
    conn.create_function(
        "lm_doc_len", 1, lambda d: d.count(" ") + 1 if d else 0, deterministic=True
    )
