"""Redis URLs: shown without their password, and checked before a client is made."""

from __future__ import annotations

import urllib.parse
from typing import Any

from searchfuse.errors import ConfigError

__all__ = ["client_url", "redacted_url"]


def redacted_url(url: str) -> str:
    """`url` without its password (and user), for messages and `repr`.

    A URL that cannot be parsed (a port out of range or not a number, an
    unclosed `[` of an IPv6 address) is a ConfigError naming the setting,
    showing the URL without what came before its last `@`."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        scheme, sep, rest = url.partition("://")
        shown = scheme + sep + rest[rest.rfind("@") + 1 :]
        raise ConfigError(
            "state",
            None,
            f"{shown!r} is not a usable Redis URL ({exc})",
            "write redis://[user:password@]host:port/db with a port from 1 to 65535, "
            "for example redis://127.0.0.1:6379/0",
        ) from None
    host = parts.hostname or ""
    if port:
        host = f"{host}:{port}"
    if parts.scheme == "unix":
        shown = f"unix://{parts.path}"
    else:
        shown = urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))
    _check_database(parts, shown)
    return shown


def _check_database(parts: urllib.parse.SplitResult, shown: str) -> None:
    """A database the URL names (`/3`, `?db=3`) must be a whole number: the Redis
    client reads `redis://host/zero` as database 0 without a word, and another
    fleet's state may live there."""
    named = urllib.parse.parse_qs(parts.query).get("db", [])
    if parts.scheme != "unix" and parts.path.strip("/"):
        named.insert(0, parts.path.strip("/"))
    for db in named:
        if not (db.isascii() and db.isdigit()):
            raise ConfigError(
                "state",
                None,
                f"{shown!r} names the Redis database {db[:40]!r}, which is not a number",
                "write the database as a number, for example redis://127.0.0.1:6379/0",
            )


def client_url(client: Any) -> str | None:
    """Where a redis-py `client` connects, as a URL without a password (for
    messages and `repr`); `None` when it does not say (another kind of client)."""
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if not isinstance(kwargs, dict):
        return None
    db = kwargs.get("db", 0)
    if kwargs.get("path"):
        return f"unix://{kwargs['path']}?db={db}"
    host, port = kwargs.get("host"), kwargs.get("port")
    if not isinstance(host, str) or not isinstance(port, int):
        return None
    kind = getattr(getattr(pool, "connection_class", None), "__name__", "")
    scheme = "rediss" if "SSL" in kind else "redis"
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}:{port}/{db}"
