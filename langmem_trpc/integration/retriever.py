"""LangChain retrieval over one user's memories: `MemoryRetriever` and `MemoryVectorStore`.

Both are scoped to one `(app_name, user_id)` fixed at construction: a search
kwarg, `filter` or metadata that names a user or app is an `InvalidInputError`.
Both run the service's hybrid search, so a chain ranks memories as the
`memory_search` tool does; async calls use the service's async twins. They see
current memories only, unless a search kwarg asks for the past (`as_of=`,
`include_superseded=True`, as `SearchOptions` takes them); a document carries
its validity in its metadata (`valid_from`, and `valid_to`/`superseded_by` when set).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore
from pydantic import ConfigDict

from ..errors import ConfigurationError, InvalidInputError
from ..service.protocol import MemoryService
from ..service.rules import check_user
from ..types import Entry, Kind, Memory, SearchOptions, UserKey
from ._calls import Call, Plan, adrive, drive, each

__all__ = ["MemoryRetriever", "MemoryVectorStore", "create_retriever", "entry_document"]

_SCOPE_KEYS = frozenset({"user", "user_id", "app", "app_name", "namespace", "user_key"})
_OPTION_KEYS = frozenset(SearchOptions.model_fields) - {"query"}


def event_fields(memory: Memory, timespec: str = "auto") -> dict[str, Any]:
    """The event fields a memory has set, one shape for documents, tool results and store items."""
    out: dict[str, Any] = {}
    if memory.event_time is not None:
        out["event_time"] = memory.event_time.isoformat(timespec=timespec)
    if memory.participants:
        out["participants"] = list(memory.participants)
    if memory.location:
        out["location"] = memory.location
    return out


def entry_document(entry: Entry) -> Document:
    """A memory as a LangChain `Document`: its text, and its fields as metadata."""
    memory = entry.memory
    metadata: dict[str, Any] = {
        "id": entry.id,
        "app_name": entry.app_name,
        "user_id": entry.user_id,
        "kind": memory.kind.value,
        "topics": list(memory.topics),
        "created_at": entry.created_at.isoformat(),
        "updated_at": entry.updated_at.isoformat(),
        **event_fields(memory),
    }
    if entry.score is not None:
        metadata["score"] = entry.score
    metadata["valid_from"] = entry.valid_from.isoformat()
    if entry.valid_to is not None:  # an `as_of` or `include_superseded` search's past versions
        metadata["valid_to"] = entry.valid_to.isoformat()
    if entry.superseded_by is not None:
        metadata["superseded_by"] = entry.superseded_by
    return Document(page_content=memory.text, metadata=metadata, id=entry.id)


def _refuse_scope(user: UserKey, where: str, values: dict[str, Any]) -> None:
    named = sorted(k for k in values if k in _SCOPE_KEYS)
    if named:
        raise InvalidInputError(
            where,
            f"{', '.join(named)} cannot be set: this retriever is scoped to {user} "
            "and the scope cannot be overridden",
        )


def search_options(user: UserKey, k: int, values: dict[str, Any]) -> SearchOptions:
    """`SearchOptions` (hybrid by default) from retriever kwargs and a LangChain `filter`
    dict; a user/app key in either, or an unknown option, is refused."""
    values = dict(values)
    filters = values.pop("filter", None) or {}
    if not isinstance(filters, dict):
        raise InvalidInputError("filter", f"expected a dict, got {type(filters).__name__}")
    _refuse_scope(user, "filter", filters)
    _refuse_scope(user, "search_kwargs", values)
    merged = {**filters, **values}
    unknown = sorted(set(merged) - _OPTION_KEYS)
    if unknown:
        raise InvalidInputError(
            unknown[0], f"unknown search option; choose from {sorted(_OPTION_KEYS)}"
        )
    try:
        return SearchOptions(**{"hybrid": True, **merged, "max_results": k})
    except InvalidInputError as exc:  # SearchOptions names its own field; ours is `k`
        if exc.field == "max_results":
            raise InvalidInputError("k", exc.problem) from None
        raise


class MemoryRetriever(BaseRetriever):
    """A `BaseRetriever` over one user's memories, ranked by the service's hybrid search.

    Args:
        k: results per query (1-1000).
        search_kwargs: more `SearchOptions` fields (`kind`, `time_after`, `as_of`, ...),
            checked on every query (`create_retriever` also checks them up front).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    service: MemoryService
    user: UserKey
    k: int = 4
    search_kwargs: dict[str, Any] = {}

    def _search(self, query: str) -> Plan[list[Document]]:
        options = search_options(self.user, self.k, self.search_kwargs)
        return [entry_document(e) for e in (yield Call("search", (self.user, query, options)))]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return drive(self.service, self._search(query))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        return await adrive(self.service, self._search(query))


def create_retriever(
    service: MemoryService,
    user: UserKey,
    *,
    k: int = 4,
    kind: Kind | str | None = None,
    time_after: datetime | str | None = None,
    time_before: datetime | str | None = None,
    **search_kwargs: Any,
) -> MemoryRetriever:
    """A `MemoryRetriever` for `user`, its options checked now rather than at the first query.

    A function here, not a `MemoryService` method, so the service contract does not
    depend on LangChain's retriever types."""
    check_user(user)
    extra = {"kind": kind, "time_after": time_after, "time_before": time_before}
    search_kwargs.update({key: value for key, value in extra.items() if value is not None})
    search_options(user, k, search_kwargs)  # bad options fail here, not at the first query
    return MemoryRetriever(service=service, user=user, k=k, search_kwargs=search_kwargs)


class MemoryVectorStore(VectorStore):
    """A LangChain `VectorStore` over one user's memories.

    Texts become memories of `user` (metadata `kind`, `topics`, `event_time`,
    `participants`, `location` become memory fields, the rest memory metadata).
    The service embeds and searches; `embeddings` is only kept for callers that read it.
    """

    def __init__(
        self, service: MemoryService, user: UserKey, *, embeddings: Embeddings | None = None
    ) -> None:
        self._service = service
        self._user = check_user(user)
        self._embeddings = embeddings

    @property
    def user(self) -> UserKey:
        return self._user

    @property
    def embeddings(self) -> Embeddings | None:
        return self._embeddings

    # -- writes -------------------------------------------------------------

    def _add(
        self, texts: Iterable[str], metadatas: list[dict[str, Any]] | None, ids: Any, kwargs: Any
    ) -> Plan[list[str]]:
        _refuse_scope(self._user, "kwargs", kwargs)
        texts = list(texts)
        metas = list(metadatas) if metadatas is not None else [{} for _ in texts]
        id_list = list(ids) if ids is not None else [None] * len(texts)
        if len(metas) != len(texts) or len(id_list) != len(texts):
            raise InvalidInputError("metadatas", "texts, metadatas and ids differ in length")
        calls = []
        for text, meta, memory_id in zip(texts, metas, id_list, strict=True):
            meta = dict(meta or {})
            _refuse_scope(self._user, "metadatas", meta)
            fields: dict[str, Any] = {
                key: meta.pop(key)
                for key in ("kind", "topics", "event_time", "participants", "location")
                if key in meta
            }
            fields["metadata"] = meta
            if memory_id is not None:
                fields["memory_id"] = memory_id
            calls.append(Call("add", (self._user, text), fields))
        added = yield from each(calls)  # every text was checked before the first write
        return [entry.id for entry in added]

    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Store each text as a memory of the store's user; returns the memory ids."""
        return drive(self._service, self._add(texts, metadatas, ids, kwargs))

    async def aadd_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        return await adrive(self._service, self._add(texts, metadatas, ids, kwargs))

    def _delete(self, ids: list[str] | None, kwargs: Any) -> Plan[bool]:
        _refuse_scope(self._user, "kwargs", kwargs)
        if not ids:
            raise InvalidInputError("ids", "name the memories to delete")
        return all((yield from each(Call("delete", (self._user, m)) for m in ids)))

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Soft-delete the memories with these ids; True when every one was live."""
        return drive(self._service, self._delete(ids, kwargs))

    async def adelete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        return await adrive(self._service, self._delete(ids, kwargs))

    # -- reads --------------------------------------------------------------

    def _get(self, ids: Sequence[str]) -> Plan[list[Document]]:
        found = yield from each(Call("get", (self._user, memory_id)) for memory_id in ids)
        return [entry_document(e) for e in found if e is not None]

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        return drive(self._service, self._get(ids))

    async def aget_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        return await adrive(self._service, self._get(ids))

    def _search(self, query: str, k: int, kwargs: Any) -> Plan[list[tuple[Document, float]]]:
        options = search_options(self._user, k, kwargs)
        found = yield Call("search", (self._user, query, options))
        return [(entry_document(e), float(e.score or 0.0)) for e in found]

    def similarity_search_with_score(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """Hybrid search; the score is the service's 0-1 relevance score."""
        return drive(self._service, self._search(query, k, kwargs))

    async def asimilarity_search_with_score(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        return await adrive(self._service, self._search(query, k, kwargs))

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        return [doc for doc, _ in self.similarity_search_with_score(query, k, **kwargs)]

    async def asimilarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        return [doc for doc, _ in await self.asimilarity_search_with_score(query, k, **kwargs)]

    def _select_relevance_score_fn(self) -> Any:
        return lambda score: score  # the service's score is already 0-1, higher is better

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> MemoryVectorStore:
        """Build over `service=` and `user=` (both required kwargs), then add `texts`."""
        service, user = kwargs.pop("service", None), kwargs.pop("user", None)
        if service is None or user is None:
            raise ConfigurationError(
                "MemoryVectorStore.from_texts needs service= and user= (the store is "
                "scoped to one user of an existing memory service)"
            )
        store = cls(service, user, embeddings=embedding)
        store.add_texts(texts, metadatas, ids=ids, **kwargs)
        return store
