"""Budget tallies in the store, and the one decision over them.

A *tally* is how much of one budget's unit one spender used in one period:
`Tally(period, used)` under a name such as `conversation:c-42:searches:`.
A tally of an earlier period than the current one counts as zero, so a period
resets without anyone writing (a new UTC day or month).

The fleet's period is the latest any process has charged. A process whose
clock is a little behind (still 23:59:59 when another has passed midnight)
counts in the later period it finds, instead of writing its own period over
it: otherwise two clocks a second apart would reset each other's tally at
every search until both had passed the boundary, and serve far more than the
limit. Labels (`2026-12-03`, `2026-12`) sort as their periods do.

Tallies are bounded: each carries `expires`, after which it counts as zero
and any store may drop it (Redis by its TTL, the others when a new tally is
made). A period's tally expires a day after the period ends; a tally without
a period (a conversation's) `Budget.forget_after` seconds after its spender
was last charged *or refused*, so a conversation that keeps searching keeps
its tally, however long it runs, and one that went quiet is forgotten.

A tally of a period after the next one (`Line.latest`: a clock set years
ahead, an edited store) still counts -- counting it as nothing would let two
such clocks reset each other's tally at every search -- but it is not kept
longer than a tally of this clock's period: its expiry is read as at most the
line's `keep_until` (and written so by the next charge or refusal), so a clock
that ran once years ahead holds a spent budget a period or two, not for years,
and the refusal says when it ends. A label that is no period at all is reset
when read (`_codec.tally_from_fields`).

`over` and `charge` are pure: they read and write tallies only through
`State.tally` / `State.set_tally`, inside the grant's change function, so
every backend gets the budget check in the same transaction as the pacing
decision (SQLite `BEGIN IMMEDIATE`, a lock for memory and the JSON file; on
Redis the grant script `_redis_grant` makes the same decision on the server,
its `WATCH`/`MULTI` transaction the careful way). Two processes sharing a
budget of 25 can never both take the 25th.
"""

from __future__ import annotations

import calendar
import logging
import math
import re
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from searchfuse.router.state._records import State

__all__ = [
    "Line",
    "Tally",
    "adjust",
    "charge",
    "is_label",
    "live_tallies",
    "over",
    "period_end",
    "period_of",
]

#: Spend that floating point loses adding prices (a thousand 0.008 USD searches).
_SLACK = 1e-9

log = logging.getLogger("searchfuse.state")

_LABEL = re.compile(r"(?:\d{4}-\d{2}(?:-\d{2})?)?")


def is_label(text: object) -> bool:
    """Whether `text` is a period's label as `period_of` makes them (or `""`)."""
    return isinstance(text, str) and _LABEL.fullmatch(text) is not None


@dataclass(frozen=True)
class Tally:
    """How much one spender used of one unit in `period` (`""`: no period),
    kept until `expires` (epoch seconds on the router's clock; `None`: for ever)."""

    period: str
    used: float
    expires: float | None = None

    def live(self, period: str, now: float | None = None) -> bool:
        """Whether this tally still counts for a process in `period` at `now`: it is
        of that period or a later one (another process's clock is ahead), unexpired."""
        return self.period >= period and (now is None or self.expires is None or now < self.expires)


@dataclass(frozen=True)
class Line:
    """One budget a call is counted against: its tally's `name` and current
    `period`, its `limit`, and the `amount` this call costs in its unit.

    `index` is the budget's place in the router's list; `used` is filled in by
    `over` (the use that refused) and `charge` (the use including this call);
    `resets_at` is when the period ends (epoch seconds; `None` without one);
    `keep_until` is the `expires` its tally gets when charged or refused.
    """

    index: int
    name: str
    period: str
    limit: float
    amount: float
    resets_at: float | None = None
    used: float = 0.0
    keep_until: float | None = None

    def wait(self, now: float) -> float:
        """Seconds until the period resets (infinite without a period)."""
        return math.inf if self.resets_at is None else max(0.0, self.resets_at - now)

    def latest(self) -> str:
        """The latest period a tally of this line is believed to count in: the one
        after `period` (another process's clock a little ahead); `period` without one."""
        if self.resets_at is None or not self.period:
            return self.period
        return period_of("day" if len(self.period) == 10 else "month", self.resets_at)[0]


def period_of(period: str | None, now: float) -> tuple[str, float | None]:
    """The label of the UTC `period` ("day", "month" or `None`) holding `now`,
    and when it ends: `("2026-12-03", <midnight>)`, `("2026-12", <the 1st>)`, `("", None)`."""
    if period is None:
        return "", None
    t = time.gmtime(now)
    if period == "day":
        start = calendar.timegm((t.tm_year, t.tm_mon, t.tm_mday, 0, 0, 0, 0, 0, 0))
        return f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}", start + 86400.0
    year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
    return f"{t.tm_year:04d}-{t.tm_mon:02d}", float(
        calendar.timegm((year, month, 1, 0, 0, 0, 0, 0, 0))
    )


def period_end(label: str) -> float | None:
    """When the period labelled `label` (see `period_of`) ends; `None` without one
    (or for a label that is no period)."""
    try:
        parts = [int(p) for p in label.split("-")]
        if len(parts) == 3:
            start = calendar.timegm((parts[0], parts[1], parts[2], 0, 0, 0, 0, 0, 0))
            return start + 86400.0
        if len(parts) == 2:
            return period_of("month", calendar.timegm((*parts, 1, 0, 0, 0, 0, 0, 0)))[1]
    except (ValueError, OverflowError):
        pass
    return None


def live_tallies(tallies: Mapping[str, Tally], now: float, prefix: str = "") -> dict[str, Tally]:
    """The tallies of `tallies` named `prefix...` and not expired at `now`."""
    return {
        name: t
        for name, t in tallies.items()
        if name.startswith(prefix) and (t.expires is None or t.expires > now)
    }


def _kept(line: Line, tally: Tally | None) -> float | None:
    """The expiry a tally gets when `line` is charged or refused: never earlier than
    it had (two budgets sharing a tally keep the later one)."""
    if line.keep_until is None or tally is None or tally.expires is None:
        return line.keep_until
    return max(line.keep_until, tally.expires)


_TOLD: set[str] = set()


def _live(line: Line, tally: Tally | None, now: float | None) -> Tally | None:
    """`tally` if it counts for `line` at `now` (see `Tally.live`); one of a period
    after `line.latest()` kept no longer than `line.keep_until` (said once per name)."""
    if tally is None or not tally.live(line.period, now):
        return None
    bound = line.keep_until
    if tally.period <= line.latest() or bound is None:
        return tally
    if tally.expires is None or tally.expires > bound:
        if line.name not in _TOLD and len(_TOLD) < 1000:
            _TOLD.add(line.name)
            log.warning(
                "router state: budget %s is counted in period %s, after this clock's next "
                "(%s): a clock set ahead or an edited store; kept only as long as a tally "
                "of this clock's period",
                line.name,
                tally.period,
                line.latest(),
            )
        tally = replace(tally, expires=bound)
    return tally if tally.live(line.period, now) else None


def over(state: State, lines: Sequence[Line], now: float | None = None) -> Line | None:
    """The first line this call would take over its limit, with what is used; else `None`.

    A refused spender is still active: the expiry of each of its tallies moves on
    as a charge's would, so a conversation that keeps asking is never forgotten
    into a new budget (whichever budget refused it).
    """
    for line in lines:
        live = _live(line, state.tally(line.name), now)
        spent = live.used if live is not None else 0.0
        if spent + line.amount > line.limit + _SLACK:
            _touch(state, lines, now)
            return _in(line, live, spent)
    return None


def _in(line: Line, tally: Tally | None, used: float) -> Line:
    """`line` with `used`, counted in `tally`'s period: a later one than the line's
    own when another process's clock is ahead (then it also resets when that ends)."""
    if tally is None or tally.period == line.period:
        return replace(line, used=used)
    ends = period_end(tally.period)
    if ends is not None and tally.expires is not None and tally.period > line.latest():
        ends = min(ends, tally.expires)  # a tally kept no longer (see `_live`)
    return replace(line, period=tally.period, resets_at=ends, used=used)


def _touch(state: State, lines: Sequence[Line], now: float | None) -> None:
    """Move on the expiry of every live tally of `lines` (a refused call's)."""
    for line in lines:
        stored = state.tally(line.name)
        tally = _live(line, stored, now)
        if stored is not None and tally is not None:
            kept = _kept(line, tally)
            if kept != stored.expires:
                state.set_tally(line.name, replace(stored, expires=kept))


def charge(state: State, lines: Sequence[Line], now: float | None = None) -> tuple[Line, ...]:
    """Count this call on every line (after `over` said it fits); each line comes
    back with the use including it. Two budgets of one spender, unit and period
    (a limit of 10 and one of 5) share a tally, counted once. Making a new tally
    first drops the expired ones (`State.forget_tallies`), so tallies stay bounded
    by the spenders active within their expiry."""
    out, done = [], set()
    for line in lines:
        tally = state.tally(line.name)
        live = _live(line, tally, now)
        spent = live.used if live is not None else 0.0
        if line.name not in done:
            done.add(line.name)
            if tally is None and now is not None:
                state.forget_tallies(now)
            spent += line.amount
            period = live.period if live is not None else line.period
            live = Tally(period, spent, _kept(line, live))
            state.set_tally(line.name, live)
        out.append(_in(line, live, spent))
    return tuple(out)


def adjust(state: State, lines: Sequence[Line], deltas: Sequence[float]) -> None:
    """Add `deltas[i]` to line `i`'s tally (negative: give back), never below zero.

    A tally that moved on to a new period since the charge is left alone: the
    give-back belongs to the period that was charged, which is over. (A charge
    counted in another process's later period comes back naming that period.)
    """
    done = set()
    for line, delta in zip(lines, deltas, strict=True):
        if not delta or line.name in done:
            continue
        done.add(line.name)
        tally = state.tally(line.name)
        if tally is None or tally.period != line.period:
            continue
        state.set_tally(line.name, replace(tally, used=max(0.0, tally.used + delta)))
