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
from functools import cached_property
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "KnownKeys",
    "address_name",
    "fingerprint",
    "known_keys",
    "mask",
    "redact",
    "redact_tree",
    "redact_userinfo",
]

# Tavily keys look like `tvly-dev-<random>` or `tvly-<random>`: the word
# segments in front are not secret and help a person tell keys apart.
_PREFIX = re.compile(r"^((?:[a-z]{2,6}-){1,2})")
_TAVILY_LIKE = re.compile(r"tvly-[A-Za-z0-9_-]{8,}")
#: A key that is an address (a SearXNG instance's URL).
_ADDRESS = re.compile(r"(?i)https?://")
_KEY_RUN = re.compile(r"[^\s\"',]+")
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._\-]{8,}")
# `scheme://user:password@`, whatever the scheme (redis+sentinel://, a typo):
# userinfo never holds a `/`, so a `@` later in a path does not match.
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://)[^/\s@'\"<>]+@")


def fingerprint(key: str) -> str:
    """A short, stable, non-reversible id for `key` (12 hex digits of SHA-256)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]


def mask(key: str) -> str:
    """`tvly-dev-abcdef0123a1b2` -> `tvly-dev-…a1b2`.

    Keys too short to mask safely show only their fingerprint. A "key" that is an
    instance's address (SearXNG) shows as its host: see `address_name`.
    """
    if _ADDRESS.match(key):
        return address_name(key)
    match = _PREFIX.match(key)
    prefix = match.group(1) if match else ""
    rest = key[len(prefix) :]
    if len(rest) < 8:
        return f"key#{fingerprint(key)[:8]}"
    return f"{prefix}…{rest[-4:]}"


def address_name(url: str) -> str:
    """An instance's address as people see it: `searx.example.org`, `127.0.0.1:8888`.

    Its host and port, never its user name, password, query or fragment; a path
    (`/searx`) shows as `/…` and four hex digits of the address's fingerprint, so two
    instances on one host are told apart without showing the path.
    """
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    host = parts.hostname or "?"
    name = f"[{host}]" if ":" in host else host
    if port is not None:
        name += f":{port}"
    if parts.path.strip("/"):
        name += f"/…{fingerprint(url)[:4]}"
    return name


class KnownKeys(tuple[str, ...]):
    """The configured keys, with what finds them in a text built once.

    A tuple of the keys (it iterates, compares and hashes as one). Redacting
    with a `KnownKeys` costs the length of the text, not the number of keys:
    a status table of 10,000 keys redacts each key's texts without looking
    at every other key each time.
    """

    @cached_property
    def _lengths(self) -> tuple[int, ...]:
        return tuple(sorted({len(key) for key in self if key}, reverse=True))

    @cached_property
    def _set(self) -> frozenset[str]:
        return frozenset(key for key in self if key)

    @cached_property
    def _runs(self) -> re.Pattern[str]:
        """Runs of characters keys are made of, long enough to hold the shortest key."""
        shortest = self._lengths[-1] if self._lengths else 1
        if all(_KEY_RUN.fullmatch(key) for key in self._set):
            return re.compile(rf"[^\s\"',]{{{shortest},}}")
        return re.compile(rf"(?s).{{{shortest},}}")  # a key with a space or a quote: all of it

    def mask_in(self, text: str) -> str:
        """`text` with every occurrence of one of these keys masked (longest first)."""
        if not self._set:
            return text
        # A key lies inside one run of key characters; most texts hold no run that long.
        return self._runs.sub(lambda run: self._mask_run(run.group(0)), text)

    def _mask_run(self, run: str) -> str:
        known, lengths = self._set, self._lengths
        out: list[str] = []
        i = start = 0
        last = len(run) - lengths[-1]
        while i <= last:
            for length in lengths:
                if run[i : i + length] in known:
                    out.append(run[start:i])
                    out.append(mask(run[i : i + length]))
                    i = start = i + length
                    break
            else:
                i += 1
        if not out:
            return run
        out.append(run[start:])
        return "".join(out)


def known_keys(keys: Iterable[str]) -> KnownKeys:
    """`keys` as [`KnownKeys`][searchfuse._secrets.KnownKeys] (the same object if it is one)."""
    return keys if isinstance(keys, KnownKeys) else KnownKeys(keys)


def redact(text: str, keys: Iterable[str]) -> str:
    """`text` with every occurrence of a known key replaced by its masked form.

    Also removes anything that looks like a bearer token, so an upstream error
    body that echoes a key we do not know cannot leak it either. Pass a
    `KnownKeys` when redacting many texts with many keys.
    """
    # Longest key first at each position: when one key is a prefix of another,
    # masking the shorter one first would leave the longer one's tail raw.
    text = known_keys(keys).mask_in(text)
    text = _TAVILY_LIKE.sub(lambda m: mask(m.group(0)), text)
    return redact_userinfo(_BEARER.sub(r"\1[redacted]", text))


def redact_userinfo(text: str) -> str:
    """`text` with the user name and password of every URL in it replaced by `***`.

    Whatever the scheme: a URL searchfuse refuses (`redis+sentinel://:pw@host`,
    `ftp://user:pw@host`) is quoted in the error that refuses it.
    """
    if "@" not in text:
        return text
    return _USERINFO.sub(r"\1***@", text)


def redact_tree(value: Any, keys: Iterable[str], memo: dict[str, str] | None = None) -> Any:
    """`value` (text, or dicts, lists and tuples of them) with every string redacted.

    For whatever searchfuse shows that came from a keys file, a state store or
    a server: an account name, notes, a last error, a diagnosis's evidence.
    `memo` keeps each distinct text's redacted form: a report over 10,000 keys
    repeats the same states, reasons and errors thousands of times.
    """
    known = known_keys(keys)
    if isinstance(value, str):
        if memo is None:
            return redact(value, known)
        shown = memo.get(value)
        if shown is None:
            shown = memo[value] = redact(value, known)
        return shown
    if isinstance(value, dict):
        return {k: redact_tree(v, known, memo) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_tree(v, known, memo) for v in value]
    if type(value) is tuple:
        return tuple(redact_tree(v, known, memo) for v in value)
    return value
