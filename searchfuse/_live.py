"""What `searchfuse status --watch` and the dashboard show: one read of a router's store.

A [`Snapshot`][searchfuse._live.Snapshot] is every key as `status --json` shows it
(state, usage, pacing window, cooldown, last error), the router-wide hold after a
429, the budgets and the newest events, all from one router's view of the store
that every process shares. Taking one only reads: no probe, no search, no write.
Keys appear masked only, and every text in it is redacted with the router's keys
once more (a key pasted into a note or echoed in an error never shows).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from searchfuse._secrets import redact_tree
from searchfuse.errors import SearchFailed
from searchfuse.router.state._events import _iso as iso_time

if TYPE_CHECKING:
    from searchfuse.router import Router

__all__ = ["EVENTS_SHOWN", "Snapshot", "budget_report", "iso_time", "snapshot"]

#: How many of the newest events a snapshot carries.
EVENTS_SHOWN = 50


@dataclass(frozen=True)
class Snapshot:
    """One look at the store, as JSON-ready data (see the module docstring).

    `now` is the router's clock when it was taken; `error` says why the store
    could not be read (then the rest is empty and the next look tries again).
    """

    now: float
    keys: list[dict[str, Any]] = field(default_factory=list)
    hold: dict[str, Any] | None = None
    budgets: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """What `GET /api/status` answers."""
        return {
            "time": iso_time(self.now),
            "now": self.now,
            "keys": self.keys,
            "hold": self.hold,
            "budgets": self.budgets,
            "events": self.events,
            "error": self.error,
        }


def budget_report(router: Router) -> list[dict[str, Any]]:
    """Every budget of `router`, in its order: `per`, `unit`, `period`, `limit`, and for a
    budget counting every caller (`per="router"`) what is `used` and `left` now.

    A budget per conversation or per user has a tally for each of them; `used` and
    `left` are `None` there (each conversation's own use is in its results'
    `searchfuse.budgets`, and in `Router.budgets(conversation=...)`). Read through
    [`Router.budgets`][searchfuse.Router.budgets], which takes no write lock.
    """
    fields = ("per", "unit", "period", "used", "limit", "left")
    return [{f: row.to_dict()[f] for f in fields} for row in router.budgets()]


def snapshot(router: Router, events: int = EVENTS_SHOWN) -> Snapshot:
    """Everything the live views show, read once from `router`'s store.

    A store that cannot be read (Redis down, a locked database) gives a snapshot
    with `error` set instead of raising: a view keeps running and tries again.
    """
    now = router.now()
    try:
        keys = [record.to_dict() for record in router.status()]
        hold = router.hold()
        budgets = budget_report(router)
        log = [event.to_dict() for event in router.events(events)]
    except (SearchFailed, OSError) as exc:
        error = f"cannot read the state store: {exc}"
        return Snapshot(now, error=redact_tree(error, _keys(router)))
    shown = {"keys": keys, "hold": None if hold is None else hold.to_dict()}
    shown.update(budgets=budgets, events=log)
    return Snapshot(now, **redact_tree(shown, _keys(router)))


def _keys(router: Router) -> tuple[str, ...]:
    return tuple(entry.key for entry in router.keys)
