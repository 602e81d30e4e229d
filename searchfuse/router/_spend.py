"""The router's side of spend control: which budgets a call counts against, for
how much, what the answer really cost, and what the caller is told.

The decision itself (does this call fit, and count it) is the store's, in the
same transaction as the pacing grant (`state/_budgets.py`); this module only
prepares its `Line`s and reads what came back. A budget in `searches` counts
1 per served search; in `credits` the provider's own unit (one per request
where it has none); in `usd` those units times their price
(`providers/_prices.py`), or the dollars the answer states.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from searchfuse._format import amount, duration
from searchfuse._spend import Budget, SpendScope, current_spend, spend_scope
from searchfuse.errors import BudgetExhausted, ConfigError
from searchfuse.providers._prices import check_prices, price_of, stated_usd
from searchfuse.router.config import KeyEntry
from searchfuse.router.state import Grant, State
from searchfuse.router.state._budgets import Line, Tally, adjust, period_of

if TYPE_CHECKING:
    from searchfuse.router._core import Core

__all__ = [
    "BUDGETS_VARIABLE",
    "NOTHING",
    "BudgetReports",
    "BudgetStatus",
    "Charged",
    "Line",
    "Spend",
    "Spent",
    "Tally",
    "budgets_from_env",
    "check_budgets",
    "give_back",
    "settlement",
]

#: Spender ids longer than this are kept as a prefix and a hash.
_MAX_SHOWN = 64
#: A period's tally is kept a day past the period's end: a process whose clock is
#: a little behind may still charge it.
_PERIOD_GRACE = 86400.0


def check_budgets(budgets: Iterable[Budget] | None) -> tuple[Budget, ...]:
    """`Router(budgets=...)`: a list of `Budget`s (a bare one is accepted too)."""
    if budgets is None:
        return ()
    if isinstance(budgets, Budget):
        return (budgets,)
    if isinstance(budgets, str | bytes | Mapping) or not isinstance(budgets, Iterable):
        raise TypeError(
            "budgets must be a list of searchfuse.Budget, such as "
            '[Budget(10, unit="searches", per="conversation")], '
            f"not {type(budgets).__name__}"
        )
    out = tuple(budgets)
    for i, b in enumerate(out):
        if not isinstance(b, Budget):
            raise TypeError(
                f"budgets[{i}] must be a searchfuse.Budget, not {type(b).__name__} "
                '(write Budget(10, unit="searches", per="conversation"))'
            )
    return out


#: Budgets for routers made without `budgets=`: `"10 searches per conversation, 200
#: credits per router a day"` (see `Budget.parse`); how the CLI and the gateway get theirs.
BUDGETS_VARIABLE = "SEARCHFUSE_BUDGETS"


def budgets_from_env(environ: Mapping[str, str]) -> tuple[Budget, ...]:
    """The budgets `SEARCHFUSE_BUDGETS` names (none when unset or blank)."""
    out = []
    for part in environ.get(BUDGETS_VARIABLE, "").replace(";", ",").split(","):
        if part.strip():
            try:
                out.append(Budget.parse(part))
            except ValueError as exc:
                raise ConfigError(
                    BUDGETS_VARIABLE,
                    None,
                    str(exc),
                    "write each budget as LIMIT UNIT per WHOSE [a day | a month], separated "
                    'by commas: "10 searches per conversation, 20 usd per router a month"',
                ) from None
    return tuple(out)


def _spender(text: str) -> str:
    """An id as the store keeps it: short ids as they are, long ones cut and hashed."""
    if len(text) <= _MAX_SHOWN:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{text[:32]}#{digest}"


@dataclass(frozen=True)
class Spent:
    """What a granted call counts: the lines, each line's unit, and what a unit
    cost on its key (`per_credit`: the provider counts credits, else requests)."""

    lines: tuple[Line, ...]
    units: tuple[str, ...]
    usd_per_unit: float = 0.0
    per_credit: bool = False

    def granted(self, lines: tuple[Line, ...]) -> Spent:
        """This, with the lines as the grant counted them (their use included)."""
        return replace(self, lines=lines)


NOTHING = Spent((), ())


def deltas(spent: Spent, credits: float | None, data: Any = None) -> list[float]:
    """What to add to each line once the answer is in: `credits` is what it cost
    in the provider's unit (`None`: it was not served, all is given back)."""
    if credits is None:
        return [-line.amount for line in spent.lines]
    units = credits if spent.per_credit else 1.0
    dollars = stated_usd(data)
    actual = {
        "searches": 1.0,
        "credits": units,
        "usd": dollars if dollars is not None else units * spent.usd_per_unit,
    }
    return [actual[u] - line.amount for line, u in zip(spent.lines, spent.units, strict=True)]


@dataclass(frozen=True)
class Charged:
    """A search counted at its grant: `credits`, `clean` (a success changes nothing), `spent`."""

    credits: float
    clean: bool
    spent: Spent | None = None

    def take_back(self, state: State, entry: KeyEntry) -> None:
        """Refund what this counted, budgets included (inside a transaction)."""
        state.refund(entry.fingerprint, entry.account_id, self.credits)
        give_back(state, self.spent)


def give_back(state: State, spent: Spent | None) -> None:
    """Inside a transaction: take back what `spent` counted (the call was not served)."""
    if spent is not None and spent.lines:
        adjust(state, spent.lines, deltas(spent, None))


def settlement(
    spent: Spent | None,
    credits: float,
    data: Any,
    change: Callable[[State], object] | None = None,
) -> tuple[Callable[[State], object] | None, tuple[Line, ...]]:
    """`change` (what the served answer changes of the key), joined with what
    settles `spent` at the answer's real cost; `None` when neither changes
    anything. Also the lines with their settled use."""
    if spent is None or not spent.lines:
        return change, ()
    found = deltas(spent, credits, data)
    settled = tuple(
        replace(line, used=max(0.0, line.used + d))
        for line, d in zip(spent.lines, found, strict=True)
    )
    if not any(found):
        return change, settled

    def both(state: State) -> None:
        if change is not None:
            change(state)
        adjust(state, spent.lines, found)

    return both, settled


#: Spenders a `BudgetStatus` names, the most spending first.
TOP_SPENDERS = 3


@dataclass(frozen=True)
class BudgetStatus:
    """One budget as the store has it now ([`Router.budgets`][searchfuse.Router.budgets]).

    `used` and `left` are the router's (`per="router"`) or the named spender's;
    for a `per="conversation"` or `"user"` budget with no spender named they are
    `None`, and `spenders` (how many spent something this period), `exhausted`
    (how many of them used it all) and `top` (the most spending, `(who, used)`)
    summarise every spender. `resets_at` is when the period ends (epoch seconds).
    """

    budget: Budget
    used: float | None = None
    left: float | None = None
    resets_at: float | None = None
    who: str | None = None
    spenders: int | None = None
    exhausted: int | None = None
    top: tuple[tuple[str, float], ...] = field(default=())

    def summary(self, now: float) -> str:
        """One line for people (`searchfuse status`): `"200 credits per router a day:
        37 used, 163 left, resets in 5.2 h"`; `"10 searches per conversation: 4
        conversations, 1 used all; most c-42 10, c-7 3"`."""
        b = self.budget
        head = b.describe() + (f" ({self.who})" if self.who else "")
        if self.used is not None:
            text = f"{head}: {amount(self.used)} used, {amount(self.left or 0)} left"
        else:
            count = self.spenders or 0
            many = ("conversation" if b.per == "conversation" else "user") + "s" * (count != 1)
            text = f"{head}: {count} {many} counted, {self.exhausted or 0} used all"
            if self.top:
                text += "; most " + ", ".join(f"{who} {amount(used)}" for who, used in self.top)
        if self.resets_at is not None:
            text += f", resets in {duration(self.resets_at - now)}"
        return text

    def to_dict(self) -> dict[str, Any]:
        """The JSON form `status --json` and the gateway's `/usage` show."""
        b = self.budget
        out: dict[str, Any] = {
            "budget": b.describe(),
            "per": b.per,
            "unit": b.unit,
            "period": b.period,
            "limit": b.limit,
            "used": self.used,
            "left": self.left,
            "resets_at": self.resets_at,
        }
        if b.per != "router":
            out["who"] = self.who
            out["spenders"] = self.spenders
            out["exhausted"] = self.exhausted
            out["top"] = [
                {"who": who, "used": used, "left": _left(b, used)} for who, used in self.top
            ]
        return out


class Spend:
    """One router's budgets and prices (see the module docstring)."""

    def __init__(
        self,
        budgets: Iterable[Budget] | None,
        prices: Mapping[str, Any] | None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        from_env = budgets is None and environ is not None
        self.budgets = budgets_from_env(environ or {}) if from_env else check_budgets(budgets)
        self.prices = check_prices(prices)

    @property
    def active(self) -> bool:
        """Whether any budget is set (else nothing is counted)."""
        return bool(self.budgets)

    def _who(self, budget: Budget, scope: SpendScope) -> str | None:
        if budget.per == "router":
            return "*"
        found = scope.conversation if budget.per == "conversation" else scope.user
        return None if found is None else _spender(found)

    def _lines(self, scope: SpendScope, now: float, amounts: Mapping[str, float]) -> list[Line]:
        out = []
        for i, b in enumerate(self.budgets):
            who = self._who(b, scope)
            if who is None:
                continue  # a call outside any scope naming one is not counted here
            label, ends = period_of(b.period, now)
            name = f"{b.per}:{who}:{b.unit}:{b.period or ''}"
            line = Line(i, name, label, float(b.limit), amounts[b.unit], ends)
            out.append(replace(line, keep_until=_keep_until(b, now, ends)))
        return out

    def plan(self, provider: str, kind: str, entry: KeyEntry, credits: float, now: float) -> Spent:
        """The lines a `kind` call on `entry` counts against (the running `spend_scope`),
        each with its expected cost."""
        if not self.budgets:
            return NOTHING
        usd, per_credit = price_of(provider, kind, self.prices, entry.price)
        units = credits if per_credit else 1.0
        amounts = {"searches": 1.0, "credits": units, "usd": units * usd}
        lines = tuple(self._lines(current_spend(), now, amounts))
        kinds = tuple(self.budgets[line.index].unit for line in lines)
        return Spent(lines, kinds, usd, per_credit)

    def refusal(self, grant: Grant, now: float) -> BudgetExhausted:
        """What the caller (and its model) is told for a `"budget"` grant."""
        line = grant.over
        assert line is not None
        wait = line.wait(now)
        budget = self.budgets[line.index]
        return BudgetExhausted(budget, line.used, None if math.isinf(wait) else wait)

    def report(self, lines: Sequence[Line]) -> list[dict[str, Any]]:
        """`result["searchfuse"]["budgets"]`: each counted budget's use, this call included."""
        return [_row(self.budgets[line.index], line.used) for line in lines]

    def overview(
        self, tallies: Callable[[str], Mapping[str, Tally]], scope: SpendScope, now: float
    ) -> list[BudgetStatus]:
        """Every budget as `tallies` (the store's, read by name prefix) has it at `now`:
        the router's and `scope`'s spenders' use, and a summary of the others."""
        out = []
        for b in self.budgets:
            label, ends = period_of(b.period, now)
            # A later period counts (a clock a little ahead), up to the next one.
            latest = Line(0, "", label, 0.0, 0.0, ends).latest()
            tail = f":{b.unit}:{b.period or ''}"
            found = {
                name[len(b.per) + 1 : -len(tail)]: t.used
                for name, t in tallies(f"{b.per}:").items()
                if name.endswith(tail) and label <= t.period <= latest
            }
            who = self._who(b, scope)
            if who is not None:
                spent = round(found.get(who, 0.0), 9)
                named = None if b.per == "router" else who
                out.append(BudgetStatus(b, spent, _left(b, spent), ends, named))
                continue
            top = sorted(found.items(), key=lambda item: (-item[1], item[0]))[:TOP_SPENDERS]
            spent_all = sum(1 for v in found.values() if v >= b.limit - 1e-9)
            shown = tuple((name, round(v, 9)) for name, v in top)
            out.append(BudgetStatus(b, None, None, ends, None, len(found), spent_all, shown))
        return out


def _keep_until(budget: Budget, now: float, ends: float | None) -> float | None:
    """When the tally a call charges (or is refused on) may be forgotten: a day after
    its period ends, else `forget_after` from now; the router's one tally never."""
    if ends is not None:
        return ends + _PERIOD_GRACE
    if budget.per == "router" or budget.forget_after is None:
        return None
    return now + budget.forget_after


class BudgetReports:
    """What a [`Router`][searchfuse.Router] tells of its budgets (a base of `Router`)."""

    if TYPE_CHECKING:  # what Router has
        _core: Core

        def now(self) -> float: ...

    def budgets(
        self, *, user: str | None = None, conversation: str | None = None
    ) -> list[BudgetStatus]:
        """Every budget's use as the store has it now, every process sharing it counted.

        The router's own, and `user`'s and `conversation`'s (default: the running
        `spend_scope`'s); a `per="user"` or `"conversation"` budget with no spender
        named is summarised: how many spent something this period, how many used it
        all, and who most. Read without a write lock (`Store.tallies`), so a status
        view or a dashboard never holds up a search.
        """
        now = self.now()
        with spend_scope(user=user, conversation=conversation) as scope:  # checks the ids
            return self._core.spend.overview(self._core.ledger.tallies, scope, now)


def _left(budget: Budget, spent: float) -> float:
    return max(0.0, round(budget.limit - spent, 9))


def _row(budget: Budget, spent: float) -> dict[str, Any]:
    spent = round(spent, 9)
    return {
        "per": budget.per,
        "unit": budget.unit,
        "period": budget.period,
        "used": spent,
        "limit": budget.limit,
        "left": max(0.0, round(budget.limit - spent, 9)),
    }
