"""Connection strings checked before any pool exists, and shown only redacted.

libpq's parse errors quote the fragment they choke on: an unencoded `%` in
a URL's password gives `invalid percent-encoded token: "<password>"`, and a
malformed `key=value` string quotes the word after the bad one. A pool
given such a string logs that message at WARNING on every retry and the
caller finally sees a `PoolTimeout`. `checked_conninfo` parses the string
up front and raises a `ConfigurationError` that says what is wrong without
any quoted fragment, so no secret can reach a log, a traceback or stderr;
`redacted` renders a string for messages with every secret replaced.
"""

from __future__ import annotations

import re

from ...errors import ConfigurationError

SECRET_KEYS = frozenset(
    {"password", "sslpassword", "oauth_client_secret", "scram_client_key", "scram_server_key"}
)
"""libpq keywords whose values are never shown."""

_PORT = re.compile(r"^\d{1,5}(,\d{1,5})*$")

# What libpq's parse errors mean, said without the fragment they quote.
_PROBLEMS = (
    ("percent-encoded", "a value holds a '%' that is not percent-encoding (write '%' as %25)"),
    ('missing "="', "a word is not a key=value pair (quote values with spaces in '...')"),
    ("unterminated quoted string", "a quoted value is not closed"),
    ("invalid connection option", "it names an unknown connection option"),
    ("invalid uri query parameter", "it names an unknown URI query parameter"),
    ("missing key/value separator", "a URI query parameter lacks '='"),
    ("extra key/value separator", "a URI query parameter has a second '='"),
    ("end of string", "an IPv6 host is missing its closing ']'"),
    ("unexpected spec", "the URI has something unexpected after the host"),
    ("invalid uri", "it is not a valid postgresql:// URI"),
)


def checked_conninfo(conninfo: str) -> str:
    """`conninfo` unchanged once libpq parses it and its port is a number; else a
    secret-free `ConfigurationError`, raised outside the `except` block so the driver's
    message (which may quote the password) is not chained onto it either."""
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    problem: str | None = None
    try:
        params = conninfo_to_dict(conninfo)
    except ProgrammingError as exc:
        lowered = str(exc).lower()
        problem = next((p for marker, p in _PROBLEMS if marker in lowered), "libpq cannot parse it")
    if problem is not None:
        raise ConfigurationError(f"invalid PostgreSQL connection string: {problem}")
    port = params.get("port")
    if port is not None and not _PORT.match(str(port)):
        raise ConfigurationError("invalid PostgreSQL connection string: port must be a number")
    return conninfo


def redacted(conninfo: str) -> str:
    """`conninfo` as `key=value` pairs with every secret shown as `***` (for messages)."""
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        params = conninfo_to_dict(conninfo)
    except ProgrammingError:
        return "<unparseable connection string>"
    shown = {key: "***" if key in SECRET_KEYS else value for key, value in params.items()}
    return make_conninfo("", **shown)
