"""How API keys are shown: masked or fingerprinted, never raw.

A key appears raw in exactly two places: `config/keys.json` (or the
environment) and the `Authorization` header of a request. Everywhere else
(logs, exceptions, `repr`, status output, state files) it is a fingerprint
or a masked form.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import Any

__all__ = ["fingerprint", "mask", "redact", "redact_tree"]

# Tavily keys look like `tvly-dev-<random>` or `tvly-<random>`: the word
# segments in front are not secret and help a person tell keys apart.
_PREFIX = re.compile(r"^((?:[a-z]{2,6}-){1,2})")
_TAVILY_LIKE = re.compile(r"tvly-[A-Za-z0-9_-]{8,}")
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._\-]{8,}")


def fingerprint(key: str) -> str:
    """A short, stable, non-reversible id for `key` (12 hex digits of SHA-256)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]


def mask(key: str) -> str:
    """`tvly-dev-abcdef0123a1b2` -> `tvly-dev-…a1b2`.

    Keys too short to mask safely show only their fingerprint.
    """
    match = _PREFIX.match(key)
    prefix = match.group(1) if match else ""
    rest = key[len(prefix) :]
    if len(rest) < 8:
        return f"key#{fingerprint(key)[:8]}"
    return f"{prefix}…{rest[-4:]}"


def redact(text: str, keys: Iterable[str]) -> str:
    """`text` with every occurrence of a known key replaced by its masked form.

    Also removes anything that looks like a bearer token, so an upstream error
    body that echoes a key we do not know cannot leak it either.
    """
    known = sorted({key for key in keys if key}, key=len, reverse=True)
    if known:
        # One pass, longest key first: when one key is a prefix of another,
        # masking the shorter one first would leave the longer one's tail raw.
        pattern = re.compile("|".join(re.escape(key) for key in known))
        text = pattern.sub(lambda m: mask(m.group(0)), text)
    text = _TAVILY_LIKE.sub(lambda m: mask(m.group(0)), text)
    return _BEARER.sub(r"\1[redacted]", text)


def redact_tree(value: Any, keys: Iterable[str]) -> Any:
    """`value` (text, or dicts, lists and tuples of them) with every string redacted.

    For whatever searchfuse shows that came from a keys file, a state store or
    a server: an account name, notes, a last error, a diagnosis's evidence.
    """
    known = tuple(keys)
    if isinstance(value, str):
        return redact(value, known)
    if isinstance(value, dict):
        return {k: redact_tree(v, known) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_tree(v, known) for v in value]
    if type(value) is tuple:
        return tuple(redact_tree(v, known) for v in value)
    return value
