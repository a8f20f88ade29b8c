"""The MCP server's transports: stdio that answers too-deep messages, and an HTTP app
with a Host allow-list always on and an optional bearer token.

stdio: the SDK parses each line with pydantic, whose JSON parser stops at about
200 levels of nesting; the SDK then drops the line, so the client waited for
its timeout. Each line is first cut at `MAX_JSON_DEPTH`: a deeper array or
object becomes the string `TOO_DEEP`, the message parses, and the tool call
gets an error result naming the argument (`mcp_server.too_deep`).

HTTP: the SDK's DNS-rebinding protection (`TransportSecuritySettings`) is on
whatever the bind address, for the loopback names, the bind address and the
operator's names; with a token every request needs `Authorization: Bearer`.
Only the standard library is imported here at import time (the [mcp] extra
brings the rest).
"""

from __future__ import annotations

import hmac
import io
import json
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any

TOO_DEEP = "<nested too deep: cut by langmem-trpc>"
MAX_JSON_DEPTH = 64
"""Deepest nesting a stdio message keeps (the JSON-RPC envelope takes 3 of it)."""
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
WILDCARDS = ("0.0.0.0", "::", "")


def depth_limited(line: str, limit: int = MAX_JSON_DEPTH) -> str:
    """`line` (one JSON text) with every array or object nested deeper than `limit`
    replaced by the string `TOO_DEEP`; unchanged when nothing is that deep."""
    if line.count("[") + line.count("{") <= limit:
        return line
    out: list[str] = []
    depth, cut_at, start = 0, 0, 0
    in_string = escaped = False
    for i, char in enumerate(line):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth == limit + 1 and not cut_at:
                out.append(line[start:i])
                cut_at = depth
        elif char in "]}":
            if cut_at and depth == cut_at:
                out.append(json.dumps(TOO_DEEP))
                start, cut_at = i + 1, 0
            depth -= 1
    if cut_at:  # unbalanced: leave it to the SDK's parser to refuse
        return line
    out.append(line[start:])
    return "".join(out)


class _DepthLimitedLines:
    """The process's stdin as the SDK's stdio transport reads it, each line cut."""

    def __init__(self) -> None:
        import anyio

        # UTF-8 whatever the platform's encoding, as the SDK reads it
        text = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")
        self.stdin = anyio.wrap_file(text)

    def __aiter__(self) -> AsyncIterator[str]:
        return self.lines()

    async def lines(self) -> AsyncIterator[str]:
        async for line in self.stdin:
            yield depth_limited(line)


async def serve_stdio(server: Any) -> None:
    """Run `server` over stdin/stdout, every incoming line depth-limited."""
    from mcp.server.stdio import stdio_server

    async with stdio_server(stdin=_DepthLimitedLines()) as (read_stream, write_stream):  # type: ignore[arg-type]
        await server.run(read_stream, write_stream, server.create_initialization_options())


def served_hosts(host: str, allowed_hosts: Sequence[str] = ()) -> list[str]:
    """The Host names served: loopback, the bind address unless a wildcard, the operator's."""
    bound = [] if host in WILDCARDS else [f"[{host}]" if ":" in host else host]
    return list(dict.fromkeys([*LOOPBACK_NAMES, *bound, *allowed_hosts]))


class BearerToken:
    """ASGI middleware: every HTTP request needs `Authorization: Bearer <token>`
    (compared in constant time), else 401 before the MCP app reads anything."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        sent = dict(scope.get("headers") or ()).get(b"authorization", b"")
        if hmac.compare_digest(sent, self.expected):
            await self.app(scope, receive, send)
            return
        body = b'{"error":"unauthorized: send Authorization: Bearer <token>"}'
        headers = [
            (b"content-type", b"application/json"),
            (b"www-authenticate", b'Bearer realm="langmem-trpc"'),
            (b"content-length", str(len(body)).encode()),
        ]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def http_app(
    server: Any,
    *,
    host: str,
    allowed_hosts: Sequence[str] = (),
    token: str | None = None,
    max_body_bytes: int = 1024 * 1024,
) -> Any:
    """The streamable HTTP app (at /mcp): Host and Origin checked against
    `served_hosts` whatever the bind address, bodies bounded, the token required
    when given."""
    from mcp.server.transport_security import TransportSecuritySettings

    names = served_hosts(host, allowed_hosts)
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[form for name in names for form in (name, f"{name}:*")],
        allowed_origins=[
            f"{scheme}://{name}{port}"
            for name in names
            for scheme in ("http", "https")
            for port in ("", ":*")
        ],
    )
    app = server.streamable_http_app(
        host=host, transport_security=security, max_request_body_size=max_body_bytes
    )
    if token is not None:
        app.add_middleware(BearerToken, token=token)
    return app
