"""What a key's text may be: no spaces, quotes or separators, no template placeholder,
nothing an HTTP header cannot carry. Checked when a key is read, far from its first use."""

from __future__ import annotations

import re
from typing import Any

from searchfuse._secrets import mask
from searchfuse.errors import ConfigError

__all__ = ["QUOTES", "check_key"]

# Keys copied from a template and never replaced (incident 5 left a file full
# of them): refusing them early beats 401s from every key.
_PLACEHOLDER = re.compile(
    r"^tvly-(?:(?:dev|prod)-)?(?:your|x{3,}|placeholder|example|replace|changeme|insert|dummy)"
    r"|[<>…]|\.\.\.|your[-_]?(?:api[-_]?)?key",
    re.IGNORECASE,
)


QUOTES = "\"'`\u2018\u2019\u201c\u201d"
# One regular-expression pass each (re's \s is str.isspace): a keys file of 10,000 keys is
# read on every `searchfuse status`.
_SPACE = re.compile(r"\s")
_QUOTE = re.compile(f"[{re.escape(QUOTES)}]")
#: What a key may contain: printable ASCII without spaces, quotes or separators.
KEY_CHARS = re.compile(r"[!#-&(-+\--:<-~]+")


def _describe(ch: str) -> str:
    if ch == "\x00":
        return "NUL (\\x00)"
    if ch.isprintable():
        return f"{ch!r} (U+{ord(ch):04X})"
    return f"U+{ord(ch):04X}"


def check_key(value: Any, source: str, where: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(
            source, where, f"expected a key string, got {type(value).__name__}", 'write "tvly-..."'
        )
    key = value.strip()
    if not key:
        raise ConfigError(source, where, "the key is empty", "paste the key from app.tavily.com")
    if _SPACE.search(key):
        raise ConfigError(
            source, where, "the key contains white space", "paste the key without spaces"
        )
    if _QUOTE.search(key):
        raise ConfigError(
            source, where, "the key contains quote characters", "write the key without quotes"
        )
    if ";" in key:
        raise ConfigError(
            source, where, "the key contains ';'", "separate keys with commas, not semicolons"
        )
    if _PLACEHOLDER.search(key) or key.lower() in {"tvly-", "tvly"}:
        raise ConfigError(
            source,
            where,
            f"{mask(key)} is a placeholder from a template, not a real key",
            "replace it with a key from your Tavily dashboard, or remove the entry",
        )
    if not KEY_CHARS.fullmatch(key):
        # NUL, control and non-ASCII characters cannot travel in an HTTP header:
        # they would fail at the first request, far from the cause.
        bad = next(ch for ch in key if not KEY_CHARS.fullmatch(ch))
        raise ConfigError(
            source,
            where,
            f"the key contains the character {_describe(bad)}, which no Tavily key has",
            "paste the key again from app.tavily.com (letters, digits, '-' and '_' only)",
        )
    return key
