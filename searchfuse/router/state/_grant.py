"""The pick: one decision, inside the store's transaction."""

from __future__ import annotations

import math
from dataclasses import dataclass

from searchfuse._format import amount
from searchfuse.router.state import _budgets as budgets
from searchfuse.router.state._budgets import Line
from searchfuse.router.state._events import Event, EventKind
from searchfuse.router.state._records import Availability, State

__all__ = [
    "FRESH",
    "FRESH_CLEAN",
    "GRANTED",
    "GRANTED_CLEAN",
    "Charge",
    "Grant",
    "acquire",
    "search_log",
]


@dataclass(frozen=True)
class Grant:
    """What a store said to "may this key send a search now?".

    `verdict` is `"ok"` (the request is counted in the key's pacing log and
    may be sent), `"held"` (the router-wide 429 hold runs), `"blocked"`
    (the key is cooling, exhausted or disabled: see `availability`) or
    `"paced"` (the key's rate is used up). `wait` is the seconds until the
    hold ends, the cooldown ends, or the pacing log has room.
    """

    verdict: str
    wait: float = 0.0
    availability: Availability = Availability.AVAILABLE
    hold_key: str | None = None
    #: With `"ok"` and a charge: the key already looked as a success leaves it.
    clean: bool = False
    #: The store decided on records it knew to be current: nothing was
    #: written by another process (or store) since its own last write.
    fresh: bool = False
    #: With `"ok"`: the budget lines counted, each with its use including this call.
    spent: tuple[Line, ...] = ()
    #: With `"budget"`: the line this call would have taken over its limit.
    over: Line | None = None


GRANTED = Grant("ok")
#: A granted, charged search on a key that a success would not change.
GRANTED_CLEAN = Grant("ok", clean=True)
#: The same, decided on records the store knew to be current (`Grant.fresh`).
FRESH = Grant("ok", fresh=True)
FRESH_CLEAN = Grant("ok", clean=True, fresh=True)


@dataclass(frozen=True)
class Charge:
    """A search counted when it is granted, so that a served search needs
    no second transaction: `credits` on key `fp` of account `account_id`."""

    fp: str
    account_id: str
    account: str | None
    credits: float


def search_log(fp: str) -> str:
    """The name of key `fp`'s pacing log of searches."""
    return f"search:{fp}"


def acquire(
    state: State,
    fp: str,
    now: float,
    *,
    rpm: int | None,
    window: float,
    honour_hold: bool,
    charge: Charge | None = None,
    spend: tuple[Line, ...] = (),
) -> Grant:
    """Check the budgets, the hold and the key, then count the search in the key's
    pacing log (and, with `spend`, on its budget tallies).

    Runs inside one transaction, so the hold another process wrote with its
    park, and the pacing every process shares, are seen before anything is sent.
    With `charge`, a granted search is also counted (and its expected credits):
    the router refunds it if the search is not served.
    """
    if spend:
        # First: a spent budget is the answer whatever the keys say (waiting
        # for a cooldown would not help the caller).
        refused = budgets.over(state, spend, now)
        if refused is not None:
            wait = refused.wait(now)
            used, limit = amount(refused.used), amount(refused.limit)
            detail = f"budget {refused.name}: {used} of {limit} used"
            until = refused.resets_at
            state.note(Event(now, EventKind.BUDGET, None, fp, detail, until and wait, until))
            return Grant("budget", wait, over=refused)
    if honour_hold:
        left = state.hold_left(now)
        if left > 0:
            return Grant("held", left, hold_key=state.hold_key)
    ks = state.key(fp)
    availability = ks.availability(now)
    if availability is not Availability.AVAILABLE:
        wait = ks.cooldown_left(now) if ks.cooling(now) else math.inf
        return Grant("blocked", wait, availability)
    if rpm is not None:
        wait = state.take(search_log(fp), rpm, window, now)
        if wait > 0:
            return Grant("paced", wait)
    spent = budgets.charge(state, spend, now) if spend else ()
    if charge is not None:
        clean = state.charge(charge.fp, charge.account_id, charge.account, charge.credits, now)
        if spent:
            return Grant("ok", clean=clean, spent=spent)
        return GRANTED_CLEAN if clean else GRANTED
    return Grant("ok", spent=spent) if spent else GRANTED
