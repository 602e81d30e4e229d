"""What crosses the wire, checked: request bodies, error texts, figures, addresses.

Servers are not trusted: a figure that is not a plausible number counts as
absent, an error text is cut to one short printable line, and an address that
is not `http(s)://host[:port][/path]` is refused before anything is sent.
"""

from __future__ import annotations

import json
import math
import urllib.parse
from collections.abc import Mapping
from typing import Any

from searchfuse.errors import ConfigError

__all__ = [
    "MAX_ERROR_TEXT",
    "MAX_FIGURE",
    "JSONBody",
    "encode_json",
    "figure",
    "short_text",
    "validate_base_url",
]

#: Error text kept (in the state, in exceptions, in status tables): one short line.
MAX_ERROR_TEXT = 300
#: Credit figures above this are not believed (Tavily's largest plans are far below).
MAX_FIGURE = 1e12


def encode_json(body: Mapping[str, Any]) -> bytes:
    """`body` as the JSON text sent (UTF-8, no NaN or infinity).

    Raises `ValueError`, `TypeError` or `UnicodeEncodeError` for what JSON
    cannot carry.
    """
    return json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode(
        "utf-8"
    )


class JSONBody(dict[str, Any]):
    """A request body checked once, with its JSON text (`content`) encoded then.

    The router encodes a body when it checks it, before any key is granted;
    the request sends that text instead of encoding the body again.
    """

    __slots__ = ("content",)

    def __init__(self, body: dict[str, Any]) -> None:
        super().__init__(body)
        self.content = encode_json(self)


def short_text(text: str) -> str:
    """One line of printable text, at most `MAX_ERROR_TEXT` characters (error texts)."""
    text = " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
    if len(text) > MAX_ERROR_TEXT:
        text = text[: MAX_ERROR_TEXT - 1] + "…"
    return text


def figure(value: Any) -> float | None:
    """A credit figure from a server, or `None` when it is not a plausible one.

    Booleans, strings, negatives, NaN, infinities and numbers beyond
    `MAX_FIGURE` all count as absent.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        return None
    if not math.isfinite(number) or number < 0 or number > MAX_FIGURE:
        return None
    return number


def validate_base_url(
    url: str, source: str, provider: str = "Tavily", default: str = "https://api.tavily.com"
) -> str:
    """`url` without a trailing slash, or [`ConfigError`][searchfuse.errors.ConfigError] naming
    `source` and the fix (`provider`'s own address is `default`)."""
    fix = f"set {source} to {provider}'s address, {default}, or to an http(s) URL of a proxy"

    def bad(problem: str) -> ConfigError:
        return ConfigError("environment" if source.isupper() else source, source, problem, fix)

    if not isinstance(url, str):
        raise bad(f"expected a URL string, got {type(url).__name__}")
    text = url.strip()
    if not text.isascii() or any(ch.isspace() or not ch.isprintable() for ch in text):
        raise bad(f"{text[:80]!r} contains spaces or characters a URL cannot hold")
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise bad(f"{text[:80]!r} is not a usable URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise bad(
            f"{text[:80]!r} has no http:// or https:// scheme"
            if not parts.scheme or "." in parts.scheme
            else f"{text[:80]!r} uses {parts.scheme}://; only http and https work"
        )
    if not parts.hostname:
        raise bad(f"{text[:80]!r} names no host")
    if port == 0:
        raise bad(f"{text[:80]!r} has port 0")
    if parts.username or parts.password:
        raise bad("the URL holds a user name or password; keys travel in a header, not the URL")
    if parts.query or parts.fragment:
        raise bad(f"{text[:80]!r} has a query or fragment; give only scheme, host, port and path")
    return text.rstrip("/")
