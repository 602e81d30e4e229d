"""The store's event log: the last 429s, cooldowns, holds, moves down the chain and
budget refusals, so `status --watch` and the dashboard show every process's.

An event is written in the transaction of the change that caused it: most are
read off the change itself (`changed_events`: a key's new 429, cooldown,
exhaustion or cleared cooldown, a new hold), the rest are noted by the code
that decides them (`State.note`: a budget refusal, a provider passed over).
Every store keeps the newest `MAX_EVENTS`. A stored event names its key by
fingerprint only; the reader that knows the key adds its masked form.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from searchfuse._secrets import redact
from searchfuse.router.state._records import KeyState
from searchfuse.router.state._values import BadValue, _parse

__all__ = [
    "MAX_EVENTS",
    "Event",
    "EventKind",
    "changed_events",
    "event_from_fields",
    "event_to_fields",
    "newest",
]

#: How many events a store keeps (older ones are dropped as new ones come).
MAX_EVENTS = 200


class EventKind(enum.StrEnum):
    """What an event records (see docs/live.md)."""

    RATE_LIMITED = "rate_limited"
    COOLDOWN = "cooldown"
    COOLDOWN_CLEARED = "cooldown_cleared"
    EXHAUSTED = "exhausted"
    HOLD = "hold"
    PASSED_OVER = "passed_over"
    SERVES_AGAIN = "serves_again"
    BUDGET = "budget"


@dataclass(frozen=True)
class Event:
    """One thing that happened to the router's keys, as the store keeps it.

    `fingerprint` names the key (never the key itself); `key` is its masked
    form, filled in by a reader that knows the key. `until` is when a cooldown
    or hold ends, `retry_after` the seconds it lasts from `time`.
    """

    time: float
    kind: str
    provider: str | None = None
    fingerprint: str | None = None
    detail: str = ""
    retry_after: float | None = None
    until: float | None = None
    key: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form: `time` as ISO 8601 UTC, the key masked."""
        return {
            "time": _iso(self.time),
            "kind": self.kind,
            "provider": self.provider,
            "key": self.key,
            "fingerprint": self.fingerprint,
            "detail": self.detail,
            "retry_after": self.retry_after,
            "until": None if self.until is None else _iso(self.until),
        }

    def shown(self, masked: Mapping[str, str], providers: Mapping[str, str]) -> Event:
        """This event with its key masked and its provider named, where known."""
        fp = self.fingerprint or ""
        return replace(
            self,
            key=self.key or masked.get(fp),
            provider=self.provider or providers.get(fp),
        )


def _iso(t: float) -> str:
    whole = int(t)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
    return f"{stamp}.{int((t - whole) * 1000):03d}Z"


#: Stored fields of an event and their kinds (see `_values`).
_FIELDS = {
    "time": "float",
    "kind": "str",
    "provider": "str?",
    "fingerprint": "str?",
    "detail": "str?",
    "retry_after": "float?",
    "until": "float?",
}


def event_to_fields(event: Event) -> dict[str, Any]:
    """The stored form of `event`: no `None` fields, its text redacted (a key an
    error text echoed never reaches the store), its masked key left out."""
    out: dict[str, Any] = {"time": event.time, "kind": event.kind}
    for name in ("provider", "fingerprint", "retry_after", "until"):
        value = getattr(event, name)
        if value is not None:
            out[name] = value
    if event.detail:
        out["detail"] = redact(event.detail[:500], ())
    return out


def event_from_fields(raw: Any) -> Event | None:
    """The event in stored fields; `None` for one that is damaged (it is skipped)."""
    if not isinstance(raw, Mapping):
        return None
    values: dict[str, Any] = {}
    try:
        for name, kind in _FIELDS.items():
            values[name] = _parse(kind, raw.get(name))
    except BadValue:
        return None
    values["detail"] = values["detail"] or ""
    return Event(**values)


def newest(events: Iterable[Event], limit: int) -> list[Event]:
    """At most `limit` of `events` (oldest first), newest first."""
    kept = list(events)[-limit:] if limit > 0 else []
    return kept[::-1]


def changed_events(fp: str, before: KeyState | None, after: KeyState, now: float) -> list[Event]:
    """What a transaction's change to key `fp` tells: a new 429 or other error that
    parked it, its exhaustion, or a cooldown that ended."""
    was = before if before is not None else KeyState()
    out = []
    until = after.cooldown_until
    parked = until is not None and until > now and until != was.cooldown_until
    wait = until - now if parked and until is not None else None
    erred = after.last_error_at is not None and after.last_error_at != was.last_error_at
    detail = after.last_error or after.cooldown_reason or ""
    if parked and after.cooldown_reason == EventKind.EXHAUSTED:  # until its provider's reset
        out.append(Event(now, EventKind.EXHAUSTED, None, fp, detail, wait, until))
    elif erred and after.last_status == 429:
        kept = until if parked else None
        out.append(Event(now, EventKind.RATE_LIMITED, None, fp, detail, wait, kept))
    elif parked:
        out.append(Event(now, EventKind.COOLDOWN, None, fp, detail, wait, until))
    if after.exhausted and not was.exhausted:
        out.append(Event(now, EventKind.EXHAUSTED, None, fp, after.last_error or "out of credits"))
    if was.cooldown_until is not None and after.cooldown_until is None:
        early = was.cooldown_until > now
        why = "ended early" if early else "its cooldown is over and it served"
        out.append(Event(now, EventKind.COOLDOWN_CLEARED, None, fp, why))
    return out
