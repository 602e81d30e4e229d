"""Status records: what `router.status()` and `router.test_keys()` report per key.

Keys appear masked and by fingerprint only, and every text taken from the keys
file or the state (account, notes, cooldown reason, last error) is redacted
with the configured keys and the generic key and bearer-token patterns.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from searchfuse._secrets import known_keys, redact_tree
from searchfuse.router.selection import Candidate
from searchfuse.router.state import KeyUsage

__all__ = ["Hold", "KeyStatus", "ProbeResult", "key_status"]


@dataclass(frozen=True)
class KeyStatus:
    """One key as the router sees it now."""

    key: str
    fingerprint: str
    account: str | None
    notes: str
    #: `"available"`, `"cooling"`, `"exhausted"`, `"disabled"`, or `"held"` (a key that
    #: could serve while the router-wide 429 hold runs: nothing is sent with it).
    state: str
    blocked_reason: str | None
    key_usage: float | None
    key_limit: float | None
    search_usage: float | None
    plan_usage: float | None
    plan_limit: float | None
    local_credits: float
    #: Credits left (lesser of key and plan), `None` when unknown.
    remaining: float | None
    cooldown_left: float
    cooldown_reason: str | None
    cooldown_until: float | None
    last_error: str | None
    last_sync_age: float | None
    searches: int
    #: The provider the key belongs to (`"tavily"`, `"exa"`, ...).
    provider: str = "tavily"
    #: Searches sent with the key in the last `window_seconds`, as the store's pacing log
    #: has them (every process sharing the store); `None` when pacing is off or the
    #: store cannot tell.
    window_requests: int | None = None
    #: The key's rate: at most `window_limit` searches in any `window_seconds`.
    window_limit: int | None = None
    window_seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (what `searchfuse status --json` prints)."""
        return asdict(self)


@dataclass(frozen=True)
class Hold:
    """The router-wide hold after a 429: no search is sent with any key until `until`."""

    #: Seconds the hold still runs.
    seconds_left: float
    #: When it ends (epoch seconds, the router's clock).
    until: float
    #: The masked key whose 429 set it (`None` when the key is not one of this router's).
    key: str | None
    #: That key's provider, where known.
    provider: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return asdict(self)


@dataclass(frozen=True)
class ProbeResult:
    """The answer of one `/usage` probe."""

    key: str
    fingerprint: str
    status_code: int | None
    note: str
    #: The provider the key belongs to.
    provider: str = "tavily"

    @property
    def ok(self) -> bool:
        """True when `/usage` answered 200."""
        return self.status_code == 200

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {**asdict(self), "ok": self.ok}


def key_status(
    c: Candidate,
    now: float,
    left: float,
    blocked: str | None,
    secrets: Iterable[str] = (),
    memo: dict[str, str] | None = None,
    **more: Any,
) -> KeyStatus:
    """Build a [`KeyStatus`][searchfuse.router.KeyStatus] from a selection candidate.

    Its texts are redacted with `secrets` (the configured keys) and the
    generic key patterns: a key pasted into `notes` never shows raw. `memo`,
    shared by the records of one report, redacts each distinct text once.
    `more`: other fields of the record (its pacing window), set as it is made.
    """
    known = known_keys(secrets)

    def text(value: str | None) -> str | None:
        return None if value is None else redact_tree(value, known, memo)

    ks = c.state
    usage = ks.last_usage or KeyUsage()
    state = str(ks.availability(now))
    return KeyStatus(
        key=c.entry.masked,
        fingerprint=c.entry.fingerprint,
        account=text(c.entry.account),
        notes=redact_tree(c.entry.notes, known, memo),
        state=state,
        blocked_reason=text(blocked),
        key_usage=usage.key_usage,
        key_limit=usage.key_limit,
        search_usage=usage.search_usage,
        plan_usage=c.account.plan_usage,
        plan_limit=c.account.plan_limit,
        local_credits=ks.local_credits,
        remaining=None if math.isinf(left) else left,
        cooldown_left=ks.cooldown_left(now),
        cooldown_reason=text(ks.cooldown_reason) if ks.cooling(now) else None,
        cooldown_until=ks.cooldown_until,
        last_error=text(ks.last_error),
        last_sync_age=None if ks.last_sync_at is None else max(0.0, now - ks.last_sync_at),
        searches=ks.searches,
        provider=c.entry.provider,
        **more,
    )
