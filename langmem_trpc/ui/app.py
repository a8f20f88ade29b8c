"""The inspector web app (`langmem-trpc ui`): Starlette, server-rendered HTML, no JavaScript.

Pages read through the `MemoryService` async API (the same on every
backend) and are addressed by query parameters (`/user?app=A&user=U`), so
any id has a URL. Every request passes the Host allow-list and the gate
(`_gate`: same-origin writes, the session cookie a login with the token
sets or the token in a header, a bounded body) before a route runs; pages
never carry the token. Writes are refused (403) with `read_only`; a strict
Content-Security-Policy (no script at all) backs the autoescaping.
"""

from __future__ import annotations

import asyncio
import difflib
import re
import secrets
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import DictLoader, Environment
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from .._time import parse_time_or_raise
from ..errors import BackendError, InvalidInputError, LangmemTrpcError, MemoryNotFoundError
from ..integration.tools import parse_date
from ..service.protocol import MemoryService
from ..transfer import export_lines, validation_problem
from ..types import Entry, HistoryEvent, Kind, Operation, SearchOptions, Source, UserKey
from ._explain import SIGNAL_LEGEND, explain_search
from ._gate import (
    COOKIE,
    DEFAULT_MAX_BODY,
    LOGIN_PATH,
    LOOPBACK_NAMES,
    TOKEN_HEADER,
    Gate,
    safe_next,
    session_value,
    token_matches,
)
from ._templates import TEMPLATES

__all__ = ["DEFAULT_MAX_BODY", "LOOPBACK_NAMES", "TOKEN_HEADER", "create_app", "new_token"]

CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    "Referrer-Policy": "same-origin",  # no-referrer makes Chrome send Origin: null
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}
UI_SOURCE = Source(actor="ui")
LIST_LIMIT = 500
USERS_PER_PAGE = 50
GONE = (Operation.DELETE, Operation.CLEAR)
SHOWS = ("deleted", "superseded")
"""The list page's `show` filter: soft-deleted memories, or every version of each."""
TITLES = {
    400: "Bad request",
    403: "Forbidden",
    404: "Not found",
    409: "Conflict",
    413: "Request too large",
    503: "Backend unavailable",
}


def new_token() -> str:
    """A fresh write token (printed by `langmem-trpc ui` at start-up)."""
    return secrets.token_urlsafe(18)


def _ts(value: datetime | None) -> str:
    return "" if value is None else value.strftime("%Y-%m-%d %H:%M")


def _day(value: datetime | None) -> str:
    return "" if value is None else value.strftime("%Y-%m-%d")


def word_diff(before: str | None, after: str | None) -> list[tuple[str, str]]:
    """Word-level diff of two texts as (kind, text) runs; kind is 'same', 'del' or 'ins'."""
    old = re.findall(r"\S+|\s+", before or "")
    new = re.findall(r"\S+|\s+", after or "")
    runs: list[tuple[str, str]] = []
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            runs.append(("same", "".join(old[i1:i2])))
            continue
        if i2 > i1:
            runs.append(("del", "".join(old[i1:i2])))
        if j2 > j1:
            runs.append(("ins", "".join(new[j1:j2])))
    return runs


def _source_rows(source: Source | None) -> list[tuple[str, str]]:
    """Every recorded field of a write's source (thread, messages, actor, and any others)."""
    fields = source.model_dump(mode="json") if source is not None else {}
    return [
        (key.replace("_", " "), ", ".join(map(str, v)) if isinstance(v, list) else str(v))
        for key, v in fields.items()
        if v not in (None, [], {}, "")
    ]


def _event_view(event: HistoryEvent) -> dict[str, Any]:
    return {
        "at": event.at,
        "op": event.operation.value,
        "diff": word_diff(event.text_before, event.text_after),
        "source": _source_rows(event.source),
    }


def _kind(value: str | None) -> Kind | None:
    if not value:
        return None
    try:
        return Kind(value)
    except ValueError:
        raise InvalidInputError("kind", f"unknown kind {value[:40]!r}") from None


def _matches(
    entry: Entry, needle: str, kind: Kind | None, after: datetime | None, before: datetime | None
) -> bool:
    """The full-text filter: kind, event time within [after, before], and `needle` in any field."""
    memory, when = entry.memory, entry.memory.event_time
    if kind is not None and memory.kind != kind:
        return False
    if (after or before) and (
        when is None or (after and when < after) or (before and when > before)
    ):
        return False
    hay = " ".join([memory.text, *memory.topics, *memory.participants, memory.location or ""])
    return needle.casefold() in hay.casefold()


def _message(exc: Exception) -> str:
    return str(validation_problem(exc) if isinstance(exc, ValidationError) else exc)


def _lines(value: str) -> list[str]:
    """A list field's textarea: one item per line (commas inside an item are kept)."""
    return [line.strip() for line in value.replace("\r\n", "\n").split("\n") if line.strip()]


LIST_FIELDS = ("topics", "participants")
SCALAR_FIELDS = ("kind", "event_time", "location")
NOTICES = {
    "saved": "Saved.",
    "deleted": "Deleted (soft): restore brings it back with every field.",
    "restored": "Restored with every field.",
    "unchanged": "Nothing to save: no field changed.",
    "version": "This version is current again; the version that superseded it is closed.",
}


def changed_fields(form: FormData) -> dict[str, Any]:
    """The edit form's fields the operator changed, parsed; untouched ones are left out.

    Each field is posted with its value as shown (`orig_<name>`): a field whose
    value still equals it is not sent to `update`, which then keeps the stored
    value exactly, so a save never rewrites a field nobody edited.
    """
    fields: dict[str, Any] = {}
    for name in (*LIST_FIELDS, *SCALAR_FIELDS):
        if name not in form:
            continue
        value = str(form.get(name) or "").replace("\r\n", "\n")
        if value == str(form.get("orig_" + name, "")).replace("\r\n", "\n"):
            continue
        fields[name] = _lines(value) if name in LIST_FIELDS else value.strip()
    return fields


class _UI:
    """The routes, closing over one service, its token and the read-only flag."""

    def __init__(
        self, service: MemoryService, token: str, read_only: bool, backend: str, max_body: int
    ) -> None:
        self.service = service
        self.token = token
        self.read_only = read_only
        self.max_body = max_body
        self.env = Environment(loader=DictLoader(TEMPLATES), autoescape=True)
        self.env.filters["ts"] = _ts
        self.env.filters["day"] = _day
        self.env.globals.update(  # what every page shows; never the token
            read_only=read_only,
            backend=backend,
            kinds=[k.value for k in Kind],
            legend=SIGNAL_LEGEND,
        )

    # -- plumbing -------------------------------------------------------------

    def page(self, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        if "user" in context:  # every per-user page links back with the user's query string
            context["qs"] = self.qs(context["user"])
        html = self.env.get_template(name).render(**context)
        return HTMLResponse(html, status_code=status, headers=PAGE_HEADERS)

    def user_of(self, request: Request) -> UserKey:
        app, user = request.query_params.get("app"), request.query_params.get("user")
        if not app or not user:
            raise HTTPException(400, "name the user: ?app=APP&user=USER")
        return UserKey(app, user)  # a bad one is a 400 page (`_guarded`)

    @staticmethod
    def qs(user: UserKey) -> str:
        return urlencode({"app": user.app_name, "user": user.user_id})

    def _memory_qs(self, user: UserKey, memory_id: str) -> str:
        return self.qs(user) + "&id=" + quote(memory_id, safe="")

    async def known_user(self, request: Request) -> UserKey:
        user = self.user_of(request)
        if user not in await self.service.ausers(user.app_name):
            raise HTTPException(
                404, f"no memories for user {user.user_id!r} in app {user.app_name!r}"
            )
        return user

    async def check_write(self, request: Request) -> FormData:
        """The form of a write the gate let through (authenticated, same-origin, bounded)."""
        if self.read_only:
            raise HTTPException(403, "the inspector runs read-only (--read-only)")
        return await request.form(max_files=0, max_fields=64, max_part_size=self.max_body)

    # -- login ------------------------------------------------------------------

    async def login_form(self, request: Request) -> Response:
        """The login page; `/login?token=T` (the link `langmem-trpc ui` prints) logs in at
        once and redirects to a URL without the token."""
        nxt = safe_next(request.query_params.get("next"))
        sent = request.query_params.get("token")
        if sent is not None:
            return self.logged_in(request, sent, nxt)
        return self.page("login", next=nxt, error=None, public=True)

    async def login(self, request: Request) -> Response:
        """Check the token (a bounded form), then set the session cookie."""
        form = await request.form(max_files=0, max_fields=8, max_part_size=4096)
        nxt = safe_next(str(form.get("next") or "/"))
        return self.logged_in(request, str(form.get("token") or ""), nxt)

    def logged_in(self, request: Request, sent: str, nxt: str) -> Response:
        """The session cookie and a redirect to `nxt` for the right token, else the login
        page with an error."""
        if not token_matches(sent, self.token):
            return self.page("login", 403, next=nxt, error="wrong token", public=True)
        answer = RedirectResponse(nxt, status_code=303)
        answer.set_cookie(
            COOKIE,
            session_value(self.token),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
        )
        return answer

    async def logout(self, request: Request) -> Response:
        answer = RedirectResponse("/login", status_code=303)
        answer.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
        return answer

    # -- read pages -------------------------------------------------------------

    async def index(self, request: Request) -> Response:
        """Apps and users, one page of `USERS_PER_PAGE` users at a time: the per-user
        count and last write are read for the shown users only."""
        try:
            number = int(request.query_params.get("page") or 1)
        except ValueError:
            raise InvalidInputError("page", "must be a whole number from 1") from None
        if number < 1:
            raise InvalidInputError("page", "must be a whole number from 1")
        users = sorted(await self.service.ausers(), key=lambda u: (u.app_name, u.user_id))
        pages = max(1, -(-len(users) // USERS_PER_PAGE))
        shown = users[(number - 1) * USERS_PER_PAGE : number * USERS_PER_PAGE]
        per_app = Counter(u.app_name for u in users)
        counts = await asyncio.gather(*(self.service.acount(u) for u in shown))
        latest = await asyncio.gather(*(self.service.aread(u, 1) for u in shown))
        apps: dict[str, dict[str, Any]] = {}
        for user, count, last in zip(shown, counts, latest, strict=True):
            app = apps.setdefault(
                user.app_name,
                {"name": user.app_name, "users": [], "user_count": per_app[user.app_name]},
            )
            app["users"].append(
                {
                    "user_id": user.user_id,
                    "count": count,
                    "last": last[0].updated_at if last else None,
                    "url": "/user?" + self.qs(user),
                }
            )
        return self.page(
            "index", apps=list(apps.values()), page=number, pages=pages, total_users=len(users)
        )

    async def _filtered(self, user: UserKey, f: dict[str, str]) -> list[Entry]:
        """The memories the filter `f` picks: the deleted ones (`show=deleted`, matched as
        full text), a hybrid search, or the live ones matched as full text; current ones
        unless `as_of` (what was true then) or `show=superseded` (every version) asks."""
        q = f["q"]
        kind = _kind(f["kind"])
        after = parse_date(f["after"], "after")
        before = parse_date(f["before"], "before", end=True)
        if f["show"] == "deleted":
            found = await self.service.adeleted(user, LIST_LIMIT)
            return [e for e in found if _matches(e, q.strip(), kind, after, before)]
        as_of, every = parse_time_or_raise(f["as_of"] or None, "as_of"), f["show"] == "superseded"
        if q.strip() and f["mode"] == "hybrid":
            options = SearchOptions(
                query=q,
                kind=kind,
                time_after=after,
                time_before=before,
                max_results=50,
                as_of=as_of,
                include_superseded=every,
            )
            return await self.service.asearch(user, q, options)
        found = await self.service.aread(user, LIST_LIMIT, as_of=as_of, include_superseded=every)
        return [e for e in found if _matches(e, q.strip(), kind, after, before)]

    async def user_page(self, request: Request) -> Response:
        """The user's memories, filtered; a bad filter keeps the form and says why inline.
        `show=deleted` lists the soft-deleted ones (restorable), also of a user with no
        live memory left; `show=superseded` every version, `as_of` what was true then."""
        params = request.query_params
        names = ("q", "mode", "kind", "after", "before", "show", "as_of")
        f = {k: params.get(k, "") for k in names}
        f["mode"] = f["mode"] if f["mode"] in ("hybrid", "text") else "hybrid"
        f["show"] = f["show"] if f["show"] in SHOWS else ""
        f["as_of"] = "" if f["show"] == "deleted" else f["as_of"].strip()
        deleted = f["show"] == "deleted"
        user = self.user_of(request) if deleted else await self.known_user(request)
        error, status, entries = None, 200, []
        try:
            entries = await self._filtered(user, f)
        except (InvalidInputError, ValidationError) as exc:
            error, status = _message(exc), 400
        if deleted and not entries and not error:
            await self.known_user(request)  # nothing deleted: a user without memories is a 404
        total = await self.service.acount(user)
        return self.page(
            "user",
            status,
            user=user,
            f=f,
            entries=entries,
            total=total,
            shown=len(entries),
            error=error,
            now=datetime.now(timezone.utc),
        )

    async def memory_page(self, request: Request) -> Response:
        """One memory (any version of it, marked), its version chain and its history."""
        user = self.user_of(request)
        memory_id = request.query_params.get("id") or ""
        entry = await self.service.aget(user, memory_id) if memory_id else None
        events = await self.service.ahistory(user, memory_id) if memory_id else []
        if entry is None and not events:
            raise HTTPException(404, f"no memory {memory_id!r} for user {user.user_id!r}")
        chain = await self.service.aversions(user, memory_id) if entry is not None else []
        return self.page(
            "memory",
            user=user,
            mqs=self._memory_qs(user, memory_id),
            memory_id=memory_id,
            entry=entry,
            versions=chain if len(chain) > 1 else [],
            now=datetime.now(timezone.utc),
            events=[_event_view(e) for e in events],
            restorable=entry is None and events[-1].operation in GONE,  # events: not empty
            notice=NOTICES.get(request.query_params.get("notice") or ""),
        )

    async def search_page(self, request: Request) -> Response:
        user = await self.known_user(request)
        params = request.query_params
        q, kind_name, k_text = params.get("q", ""), params.get("kind", ""), params.get("k", "10")
        explained, error = None, None
        try:
            k = int(k_text)
            kind = _kind(kind_name)
            if q.strip():
                options = SearchOptions(  # what the memory_search tool asks for
                    query=q,
                    kind=kind,
                    max_results=k,
                    hybrid=True,
                    deduplicate=True,
                    kind_fallback=kind is not None,
                )
                explained = await explain_search(self.service, user, options)
        except (InvalidInputError, ValidationError) as exc:
            error = _message(exc)
        except ValueError:
            error = "k: must be a whole number from 1 to 1000"
        return self.page(
            "search",
            400 if error else 200,
            user=user,
            q=q,
            kind=kind_name,
            k=k_text,
            ex=explained,
            error=error,
        )

    async def threads(self, request: Request) -> Response:
        """Threads in the history of the user's live memories, with their extraction cursors."""
        user = await self.known_user(request)
        entries = await self.service.aread(user, LIST_LIMIT)
        histories = await asyncio.gather(*(self.service.ahistory(user, e.id) for e in entries))
        found: dict[str, dict[str, Any]] = {}
        for event in (ev for events in histories for ev in events):
            thread = event.source.thread_id if event.source else None
            if not thread:
                continue
            row = found.setdefault(thread, {"thread": thread, "writes": 0, "last_write": event.at})
            row["writes"] += 1
            row["last_write"] = max(row["last_write"], event.at)
        rows = sorted(found.values(), key=lambda r: r["last_write"], reverse=True)
        cursors = await asyncio.gather(*(self.service.aget_cursor(user, r["thread"]) for r in rows))
        for row, cursor in zip(rows, cursors, strict=True):
            row["cursor"] = cursor
        return self.page("threads", user=user, threads=rows)

    async def export(self, request: Request) -> Response:
        user = await self.known_user(request)
        lines = await asyncio.to_thread(lambda: list(export_lines(self.service, [user])))
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{user.app_name}-{user.user_id}") + ".jsonl"
        return StreamingResponse(
            lines,
            media_type="application/x-ndjson",
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )

    # -- write actions ------------------------------------------------------------

    def _back(
        self, user: UserKey, memory_id: str | None = None, notice: str | None = None
    ) -> RedirectResponse:
        if memory_id is None:
            return RedirectResponse("/user?" + self.qs(user), status_code=303)
        url = "/memory?" + self._memory_qs(user, memory_id)
        return RedirectResponse(url + (f"&notice={notice}" if notice else ""), status_code=303)

    async def _memory_write(self, request: Request) -> tuple[FormData, UserKey, str]:
        """A checked write to one memory: its form, user and (required) id."""
        form = await self.check_write(request)
        user, memory_id = self.user_of(request), request.query_params.get("id") or ""
        if not memory_id:
            raise HTTPException(400, "id: name the memory (?id=...)")
        return form, user, memory_id

    async def edit(self, request: Request) -> Response:
        """Save the edit form: the text, and only the other fields the operator changed;
        with "save as a new version" ticked, a changed text supersedes the memory (the
        page of the new version follows)."""
        form, user, memory_id = await self._memory_write(request)
        text = str(form.get("text") or "")
        fields = changed_fields(form)
        if "orig_text" in form and not fields:
            if text.replace("\r\n", "\n") == str(form["orig_text"]).replace("\r\n", "\n"):
                return self._back(user, memory_id, "unchanged")
        supersede = form.get("supersede") == "yes"
        entry = await self.service.aupdate(
            user, memory_id, text, supersede=supersede, source=UI_SOURCE, **fields
        )
        return self._back(user, entry.id, "saved")

    async def delete(self, request: Request) -> Response:
        _, user, memory_id = await self._memory_write(request)
        if not await self.service.adelete(user, memory_id, source=UI_SOURCE):
            raise MemoryNotFoundError(memory_id)
        return self._back(user, memory_id, "deleted")

    async def restore(self, request: Request) -> Response:
        """Bring a soft-deleted memory back as it was (every field), recorded as a restore."""
        _, user, memory_id = await self._memory_write(request)
        await self.service.aundelete(user, memory_id, source=UI_SOURCE)
        return self._back(user, memory_id, "restored")

    async def restore_version(self, request: Request) -> Response:
        """Make a superseded version current again: the chain's current one is closed,
        both recorded in history (`MemoryService.restore_version`)."""
        _, user, memory_id = await self._memory_write(request)
        await self.service.arestore_version(user, memory_id, source=UI_SOURCE)
        return self._back(user, memory_id, "version")

    async def purge_memory(self, request: Request) -> Response:
        form, user, memory_id = await self._memory_write(request)
        if form.get("confirm") != "yes":
            raise InvalidInputError("confirm", "tick the box to purge the memory for good")
        if not await self.service.apurge(user, memory_id):
            raise MemoryNotFoundError(memory_id)
        return self._back(user)

    async def purge_user(self, request: Request) -> Response:
        form = await self.check_write(request)
        user = self.user_of(request)
        if form.get("confirm") != user.user_id:
            raise InvalidInputError("confirm", "type the user id exactly to purge the user")
        await self.service.apurge(user)
        return RedirectResponse("/", status_code=303)

    # -- worker panel: the write path's dead letters and per-thread cursors ----------

    async def worker(self, request: Request) -> Response:
        """Dead letters of every user (newest first) and, per thread, its extraction cursor."""
        status = request.query_params.get("status") or None
        letters = await self.service.adead_letters(status=status, limit=LIST_LIMIT)
        letters = sorted(letters, key=lambda d: d.updated_at, reverse=True)
        keys = list(dict.fromkeys((d.user, d.thread_id) for d in letters))
        cursors = await asyncio.gather(*(self.service.aget_cursor(u, t) for u, t in keys))
        dead = Counter((d.user, d.thread_id) for d in letters if d.status.value == "dead")
        threads = [
            {"user": user, "thread": thread, "cursor": cursor, "dead": dead[user, thread]}
            for (user, thread), cursor in zip(keys, cursors, strict=True)
        ]
        return self.page("worker", letters=letters, threads=threads, shown=status or "", qs=self.qs)

    async def retry(self, request: Request) -> Response:
        form = await self.check_write(request)
        letter = str(form.get("id") or "")
        if not letter:
            raise InvalidInputError("id", "name the dead letter to retry")
        if await self.service.aretry_dead_letter(letter) is None:
            raise HTTPException(404, f"no dead letter {letter!r} to retry (unknown or done)")
        return RedirectResponse("/worker", status_code=303)

    # -- errors -------------------------------------------------------------------

    def error_page(self, status: int, message: str) -> Response:
        return self.page(
            "error", status, code=status, message=message, title=TITLES.get(status, "")
        )


Endpoint = Callable[[Request], Awaitable[Response]]


def _guarded(ui: _UI, endpoint: Endpoint) -> Endpoint:
    """Library errors become error pages: bad input 400, unknown memory 404, a backend
    that cannot be reached 503, any other refusal (a conflict, the capacity) 409."""

    async def run(request: Request) -> Response:
        try:
            return await endpoint(request)
        except HTTPException as exc:
            return ui.error_page(exc.status_code, str(exc.detail))
        except MemoryNotFoundError as exc:
            return ui.error_page(404, str(exc))
        except (InvalidInputError, ValidationError) as exc:
            return ui.error_page(400, _message(exc))
        except BackendError as exc:
            return ui.error_page(503, f"the memory backend is unavailable: {exc}")
        except LangmemTrpcError as exc:
            return ui.error_page(409, f"{type(exc).__name__}: {exc}")

    return run


def backend_label(service: MemoryService) -> str:
    """The backend's name for the nav bar (`SQLiteMemoryService` -> `SQLite`)."""
    name = type(service).__name__.removesuffix("MemoryService")
    return {"InMemory": "in-memory (not saved)", "": "custom"}.get(name, name)


def _routes(ui: _UI) -> list[Route]:
    """Every page (GET) and write (POST), each behind `_guarded`."""
    gets: dict[str, Endpoint] = {
        "/": ui.index,
        "/user": ui.user_page,
        "/memory": ui.memory_page,
        "/search": ui.search_page,
        "/export.jsonl": ui.export,
        "/threads": ui.threads,
        "/worker": ui.worker,
        LOGIN_PATH: ui.login_form,
    }
    posts: dict[str, Endpoint] = {
        "/memory/edit": ui.edit,
        "/memory/delete": ui.delete,
        "/memory/restore": ui.restore,
        "/memory/restore-version": ui.restore_version,
        "/memory/purge": ui.purge_memory,
        "/user/purge": ui.purge_user,
        "/worker/retry": ui.retry,
        LOGIN_PATH: ui.login,
        "/logout": ui.logout,
    }
    routes = [Route(p, _guarded(ui, e), methods=["GET"]) for p, e in gets.items()]
    routes += [Route(p, _guarded(ui, e), methods=["POST"]) for p, e in posts.items()]
    return routes


def create_app(
    service: MemoryService,
    *,
    token: str | None = None,
    read_only: bool = False,
    allowed_hosts: Sequence[str] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY,
    location: str | None = None,
) -> Starlette:
    """The inspector as an ASGI app over `service` (the caller opens and closes it).

    `token` (fresh when None; see `app.state.token`) is what a login, or a
    script's `X-LangMem-Token` / `Authorization: Bearer` header, must present;
    `read_only` refuses and hides every write; `allowed_hosts` are the Host
    headers served, others get 400 against DNS rebinding (None: the loopback
    names only; `"*"` turns the check off); a body over `max_body_bytes` is a
    413; `location` (e.g. "SQLite file /srv/m.db") is what the nav bar shows
    (default: the backend's name).
    """
    label = location or backend_label(service)
    ui = _UI(service, token or new_token(), read_only, label, max_body_bytes)
    routes = _routes(ui)

    async def not_found(request: Request, exc: Exception) -> Response:
        return ui.error_page(getattr(exc, "status_code", 404), getattr(exc, "detail", "not found"))

    hosts = list(LOOPBACK_NAMES if allowed_hosts is None else allowed_hosts)
    middleware = [  # outermost first: the Host check, then the gate, then the routes
        Middleware(TrustedHostMiddleware, allowed_hosts=hosts),
        Middleware(Gate, token=ui.token, max_body_bytes=max_body_bytes, error_page=ui.error_page),
    ]

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # The service outlives the app (the caller closes it), but what it bound to
        # this server's loop (PostgreSQL's async pool) must go before the loop ends.
        try:
            yield
        finally:
            await service.arelease_loop()

    app = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={404: not_found, 405: not_found},
        lifespan=lifespan,
    )
    app.state.token = ui.token
    app.state.read_only = read_only
    return app
