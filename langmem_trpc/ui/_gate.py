"""The inspector's front door: who may ask, from where, and how much it may send.

Runs before any route, so nothing reads a request body for a caller that is
not authenticated (a token-less cross-site POST is refused on its headers).
In order: the Host header must be allow-listed (`TrustedHostMiddleware`,
outside this gate; against DNS rebinding); a POST must be same-origin (an
`Origin` or `Sec-Fetch-Site` naming another site is a 403); every path but
`/login` needs the session cookie or the token in a header, else a GET goes
to the login page and anything else is a 403; a body over `max_body_bytes`
is a 413 before the route sees a byte of it.

The session cookie holds HMAC(token, purpose), not the token: HttpOnly (no
script reads it), SameSite=Strict (no cross-site request carries it), bound
to the host name the operator logged in on (a rebinding page's origin never
has it). Changing the token ends every session.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from urllib.parse import quote, urlsplit

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

TOKEN_HEADER = "X-LangMem-Token"
COOKIE = "langmem_ui_session"
LOGIN_PATH = "/login"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1", "[::1]")
DEFAULT_MAX_BODY = 256 * 1024

ErrorPage = Callable[[int, str], Response]


def session_value(token: str) -> str:
    """The cookie a login sets: derived from the token, never the token itself."""
    return hmac.new(token.encode(), b"langmem-trpc ui session", hashlib.sha256).hexdigest()


def _same(sent: str, expected: str) -> bool:
    return hmac.compare_digest(sent.encode(), expected.encode())


def token_matches(sent: str | None, token: str) -> bool:
    """Constant-time check of a token a caller sent."""
    return bool(sent) and _same(sent or "", token)


def authenticated(headers: Headers, cookie: str | None, token: str) -> bool:
    """The token in `X-LangMem-Token` or `Authorization: Bearer`, or the session cookie."""
    auth = headers.get("authorization", "")
    bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else None
    if token_matches(headers.get(TOKEN_HEADER), token) or token_matches(bearer, token):
        return True
    return bool(cookie) and _same(cookie or "", session_value(token))


def cross_site(headers: Headers, scheme: str) -> str | None:
    """Why a state-changing request is not same-origin, or None when it is (or the
    browser did not say: scripts and curl send neither header)."""
    site = headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return f"a {site} request"
    origin = headers.get("origin")
    if origin is None:
        return None
    host = headers.get("host", "")
    if origin != f"{scheme}://{host}":
        return f"origin {origin[:80]!r}"
    return None


def safe_next(target: str | None) -> str:
    """A local path to return to after login (never another site)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    parts = urlsplit(target)
    return "/" if parts.scheme or parts.netloc else target


class BodyTooLarge(Exception):
    """The request body passed the gate's limit while it was read."""


class Gate:
    """ASGI middleware: origin check, authentication, then a bounded body (see module)."""

    def __init__(
        self, app: ASGIApp, *, token: str, max_body_bytes: int, error_page: ErrorPage
    ) -> None:
        self.app = app
        self.token = token
        self.max_body = max_body_bytes
        self.error_page = error_page

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        refused = self.refusal(request)
        if refused is not None:
            await refused(scope, receive, send)
            return
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
            await self.too_large()(scope, receive, send)
            return
        try:
            body = await self.read_body(receive)
        except BodyTooLarge:
            await self.too_large()(scope, receive, send)
            return
        await self.app(scope, body, send)

    def refusal(self, request: Request) -> Response | None:
        """The response that ends a request on its headers alone, or None to go on."""
        if request.method not in ("GET", "HEAD"):
            why = cross_site(request.headers, request.url.scheme)
            if why is not None:
                return self.error_page(403, f"cross-site write refused ({why})")
        if request.url.path == LOGIN_PATH:
            return None
        if authenticated(request.headers, request.cookies.get(COOKIE), self.token):
            return None
        if request.method in ("GET", "HEAD"):
            back = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"{LOGIN_PATH}?next={quote(back, safe='')}", 303)
        return self.error_page(403, "not logged in: log in with the inspector's token first")

    def too_large(self) -> Response:
        return self.error_page(413, f"request body over {self.max_body} bytes (--max-body)")

    async def read_body(self, receive: Receive) -> Receive:
        """Read the whole body (at most `max_body` bytes) and replay it to the route."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                pending: list[Message] = [message]
                break
            size += len(message.get("body", b""))
            if size > self.max_body:
                raise BodyTooLarge
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                pending = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]
                break

        async def replay() -> Message:
            return pending.pop(0) if pending else await receive()

        return replay
